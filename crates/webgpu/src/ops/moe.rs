//! Mixture-of-experts products: mul_mat_id with the weight dtypes mul_mat decodes (f32, f16,
//! bf16 and every block format of `quant.wgsl`) against f32 activations, or f16 x f16; f32
//! accumulation and result. Weights with a unit decoder and vec4-bound activations run the
//! mat-vec kernel's ID (`matmul::mul_mat_vec_id`: a workgroup column per expert slot and
//! token, with activations rounded to int8 by mul_mat's policy over the experts read); the rest
//! run `mul_mat_id.wgsl`, a workgroup per result element.

use wgllm_core::{DType, Result};

use super::rows::QUANTS;
use super::{Ctx, Dispatch};
use crate::shaders::{Kernel, PipelineKey, OP_WORDS};
use crate::variants::Family;

/// Invocations per workgroup (a power of two: the reduction halves it).
const WG: u32 = 64;

fn key(a: DType, b: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Family(Family::MulMatId),
        dtypes: vec![a, b, DType::I32, DType::F32],
        wg: WG,
    }
}

fn weight_ok(a: DType) -> bool {
    matches!(a, DType::F32 | DType::F16 | DType::BF16) || QUANTS.contains(&a)
}

/// ggml_mul_mat_id: `srcs = [experts, b, ids]`, result `[m, n_used, n_tokens]`.
pub(super) fn mul_mat_id(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (a, b, ids, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    ctx.require(
        dst.dtype == DType::F32
            && ids.dtype == DType::I32
            && (b.dtype == DType::F32 && weight_ok(a.dtype)
                || b.dtype == DType::F16 && a.dtype == DType::F16),
        "f32 activations with f32, f16, bf16 or any block format mul_mat decodes; f16 x f16; i32 ids",
    )?;
    ctx.require_f16(&[a.dtype, b.dtype])?;
    if let Some(d) = super::matmul::mul_mat_vec_id(ctx)? {
        return Ok(d);
    }
    let (k, m) = (a.layout.ne[0], a.layout.ne[1]);
    let cols = dst.layout.ne[1] * dst.layout.ne[2];
    let mut op = [0; OP_WORDS];
    op[0] = ctx.items(k)?;
    op[1] = ctx.items(m)?;
    op[2] = ctx.items(cols)?;
    Ok(vec![Dispatch {
        key: key(a.dtype, b.dtype),
        operands: vec![a, b, ids, dst],
        op_words: op,
        items: ctx.items(m * cols)?,
        groups: ctx.grid(m * cols, 1)?,
    }])
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys: Vec<PipelineKey> = [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
        .map(|a| key(a, DType::F32))
        .collect();
    keys.push(key(DType::F16, DType::F16));
    keys
}
