//! RoPE: normal, neox, multi-section, vision; YaRN scaling and frequency factors.
use wgllm_core::op::RopeParams;
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn rope(ctx: &mut Ctx, _p: &RopeParams) -> Result<()> {
    super::not_yet(ctx)
}
