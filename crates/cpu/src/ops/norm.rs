//! Normalizations: rms_norm, norm (layer norm without affine), l2_norm.
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn rms_norm(ctx: &mut Ctx, _eps: f32) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn norm(ctx: &mut Ctx, _eps: f32) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn l2_norm(ctx: &mut Ctx, _eps: f32) -> Result<()> {
    super::not_yet(ctx)
}
