//! The draw from top-k candidates (`Op::Sample`, `sample.wgsl`): one workgroup per row, the
//! candidates and their exps in workgroup memory, the sums and the draw in one invocation (k is a
//! session's few dozen candidates: correctness and determinism over speed).

use wgllm_core::{DType, Result};

use super::{Ctx, Dispatch};
use crate::kernels::{Kernel, PipelineKey, OP_WORDS, SAMPLE_MAX_K as MAX_K};

/// Invocations per workgroup (they load the candidates and compute the exps).
const WG: u32 = 64;

fn key() -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Sample,
        dtypes: vec![DType::F32, DType::I32, DType::F32, DType::I32],
        wg: WG,
    }
}

/// `Op::Sample`: one id per row drawn from `[vals, ids, params]`.
pub(super) fn sample(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (vals, ids, params, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    ctx.require(
        vals.dtype == DType::F32
            && ids.dtype == DType::I32
            && params.dtype == DType::F32
            && dst.dtype == DType::I32,
        "f32 candidates, i32 ids, f32 parameters into i32",
    )?;
    let k = vals.layout.ne[0];
    if k > u64::from(MAX_K) {
        return Err(ctx.unsupported(format!("{k} candidates (at most {MAX_K})")));
    }
    let rows = vals.layout.ne[1];
    Ok(vec![Dispatch {
        key: key(),
        operands: vec![vals, ids, params, dst],
        op_words: [0; OP_WORDS],
        items: ctx.items(rows)?,
        groups: ctx.grid(rows, 1)?,
    }])
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    vec![key()]
}
