//! soft_max with scale, mask, ALiBi and sinks.
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn soft_max(ctx: &mut Ctx, _scale: f32, _max_bias: f32) -> Result<()> {
    super::not_yet(ctx)
}
