//! Row selections: ggml_argmax and ggml_top_k (`top_k.wgsl`), one workgroup per row.

use wgllm_core::{DType, Result};

use super::{Ctx, Dispatch};
use crate::shaders::{Kernel, PipelineKey};

/// Invocations per workgroup.
const WG_SELECT: u32 = 256;
/// Largest k: each invocation keeps its slice's top k in private memory.
const MAX_K: u32 = 64;

fn top_k_key(src: DType, k: u32, argmax: bool) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::TopK { k, argmax },
        dtypes: vec![src, DType::I32],
        wg: WG_SELECT,
    }
}

fn select(ctx: &Ctx, k: u32, argmax: bool) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    ctx.require(
        matches!(a.dtype, DType::F32 | DType::F16 | DType::BF16) && dst.dtype == DType::I32,
        "f32, f16 or bf16 rows into i32",
    )?;
    ctx.require_f16(&[a.dtype])?;
    if k > MAX_K {
        return Err(ctx.unsupported(format!("k = {k} (at most {MAX_K})")));
    }
    let rows = a.layout.nrows();
    Ok(vec![Dispatch {
        key: top_k_key(a.dtype, k, argmax),
        operands: vec![a, dst],
        op_words: [0; 12],
        items: ctx.items(rows)?,
        groups: ctx.grid(rows, 1)?,
    }])
}

/// ggml_argmax: the first index of each row's largest value.
pub(super) fn argmax(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    select(ctx, 1, true)
}

/// ggml_top_k: the indices of each row's `k` largest values, largest first.
pub(super) fn top_k(ctx: &Ctx, k: u32) -> Result<Vec<Dispatch>> {
    select(ctx, k, false)
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys = Vec::new();
    for t in [DType::F32, DType::F16, DType::BF16] {
        keys.push(top_k_key(t, 1, true));
        for k in [1, 5, 40, MAX_K] {
            keys.push(top_k_key(t, k, false));
        }
    }
    keys
}
