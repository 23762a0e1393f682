//! Convolutions: conv_2d (direct) and im2col.
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn conv_2d(ctx: &mut Ctx, _s: [u32; 2], _p: [u32; 2], _d: [u32; 2]) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn im2col(
    ctx: &mut Ctx,
    _s: [u32; 2],
    _p: [u32; 2],
    _d: [u32; 2],
    _is_2d: bool,
) -> Result<()> {
    super::not_yet(ctx)
}
