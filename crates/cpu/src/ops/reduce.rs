//! Reductions and sorting: sum, sum_rows, cumsum, argmax, argsort, top_k.
use wgllm_core::op::SortOrder;
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn sum(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn sum_rows(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn cumsum(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn argmax(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn argsort(ctx: &mut Ctx, _order: SortOrder) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn top_k(ctx: &mut Ctx, _k: u32) -> Result<()> {
    super::not_yet(ctx)
}
