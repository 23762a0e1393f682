//! One module per op family; `eval` routes every op with an exhaustive match.

mod attention;
mod conv;
mod elementwise;
mod glu;
mod linalg;
mod matmul;
mod movement;
mod norm;
mod reduce;
mod rope;
mod sample;
mod shape;
mod softmax;
mod ssm;

use wgllm_core::{Op, Result};

use crate::Ctx;

/// Computes node `ctx.id` from its sources.
pub(crate) fn eval(ctx: &mut Ctx) -> Result<()> {
    match &ctx.node.op {
        Op::Input | Op::Weight | Op::State => Ok(()),
        Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => Ok(()),
        Op::Cpy => movement::cpy(ctx),
        Op::Cont => movement::cont(ctx),
        Op::Set { nb, offset } => shape::set(ctx, *nb, *offset),
        Op::SetRows => movement::set_rows(ctx),
        Op::GetRows => movement::get_rows(ctx),
        Op::Concat { dim } => shape::concat(ctx, *dim),
        Op::Repeat => shape::repeat(ctx),
        Op::Pad { lp, rp, circular } => shape::pad(ctx, *lp, *rp, *circular),
        Op::Diag => shape::diag(ctx),
        Op::Tri { kind } => shape::tri(ctx, *kind),
        Op::Fill { value } => elementwise::fill(ctx, *value),
        Op::MulMat => matmul::mul_mat(ctx),
        Op::MulMatId => matmul::mul_mat_id(ctx),
        Op::SolveTri { left, lower, uni } => linalg::solve_tri(ctx, *left, *lower, *uni),
        Op::Conv2d {
            stride,
            pad,
            dilation,
        } => conv::conv_2d(ctx, *stride, *pad, *dilation),
        Op::Im2Col {
            stride,
            pad,
            dilation,
            is_2d,
        } => conv::im2col(ctx, *stride, *pad, *dilation, *is_2d),
        Op::Binary(op) => elementwise::binary(ctx, *op),
        Op::AddId => shape::add_id(ctx),
        Op::Unary(op) => elementwise::unary(ctx, *op),
        Op::Clamp { min, max } => elementwise::clamp(ctx, *min, *max),
        Op::Scale { scale, bias } => elementwise::scale(ctx, *scale, *bias),
        Op::Glu { op, swapped } => glu::glu(ctx, *op, *swapped),
        Op::RmsNorm { eps } => norm::rms_norm(ctx, *eps),
        Op::Norm { eps } => norm::norm(ctx, *eps),
        Op::L2Norm { eps } => norm::l2_norm(ctx, *eps),
        Op::SoftMax { scale, max_bias } => softmax::soft_max(ctx, *scale, *max_bias),
        Op::Rope(p) => rope::rope(ctx, p),
        Op::FlashAttnExt {
            scale,
            max_bias,
            logit_softcap,
        } => attention::flash_attn_ext(ctx, *scale, *max_bias, *logit_softcap),
        Op::Sum => reduce::sum(ctx),
        Op::SumRows => reduce::sum_rows(ctx),
        Op::CumSum => reduce::cumsum(ctx),
        Op::ArgMax => reduce::argmax(ctx),
        Op::ArgSort { order } => reduce::argsort(ctx, *order),
        Op::TopK { k } => reduce::top_k(ctx, *k),
        Op::Sample => sample::sample(ctx),
        Op::SsmConv => ssm::ssm_conv(ctx),
        Op::SsmScan => ssm::ssm_scan(ctx),
        Op::GatedDeltaNet => ssm::gated_delta_net(ctx),
        Op::Upscale { mode } => shape::upscale(ctx, *mode),
    }
}
