//! flash_attn_ext: masked, GQA, ALiBi, logit softcap, sinks; K/V in any dtype.
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn flash_attn_ext(
    ctx: &mut Ctx,
    _scale: f32,
    _max_bias: f32,
    _softcap: f32,
) -> Result<()> {
    super::not_yet(ctx)
}
