//! GLU family: reglu, geglu, swiglu, swiglu_oai, geglu_erf, geglu_quick (split and halves forms).
use wgllm_core::op::GluOp;
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn glu(ctx: &mut Ctx, _op: GluOp, _swapped: bool) -> Result<()> {
    super::not_yet(ctx)
}
