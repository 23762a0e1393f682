//! Sequence-model ops: ssm_conv, ssm_scan (Mamba), gated_delta_net.
use wgllm_core::Result;

use crate::Ctx;

pub(crate) fn ssm_conv(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn ssm_scan(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
pub(crate) fn gated_delta_net(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
