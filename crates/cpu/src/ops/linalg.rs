//! Linear algebra: solve_tri.
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn solve_tri(ctx: &mut Ctx, _left: bool, _lower: bool, _uni: bool) -> Result<()> {
    super::not_yet(ctx)
}
