//! Shape-changing copies: set, concat, repeat, pad, diag, tri, upscale, add_id.
use wgllm_core::op::{ScaleMode, TriKind};
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn set(ctx: &mut Ctx, _nb: [u64; 3], _offset: u64) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn concat(ctx: &mut Ctx, _dim: usize) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn repeat(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn pad(ctx: &mut Ctx, _lp: [u32; 4], _rp: [u32; 4], _circular: bool) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn diag(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn tri(ctx: &mut Ctx, _kind: TriKind) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn upscale(ctx: &mut Ctx, _mode: ScaleMode) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn add_id(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
