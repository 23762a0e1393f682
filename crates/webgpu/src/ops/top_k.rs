//! Row selections: ggml_argmax and ggml_top_k (`top_k.wgsl`): one workgroup per row, or for
//! long rows (a vocabulary) one per chunk of `CHUNK` values and then one per row merging the
//! chunks' candidates.

use wgllm_core::{DType, Result};

use super::{Ctx, Dispatch, Operand};
use crate::shaders::{Kernel, PipelineKey, TopKStage, OP_WORDS};

/// Invocations per workgroup.
const WG_SELECT: u32 = 256;
/// Largest k: each invocation keeps its slice's top k in private memory.
const MAX_K: u32 = 64;
/// Values per workgroup of a long row's first stage.
const CHUNK: u64 = 2048;

fn select_key(src: DType, k: u32, argmax: bool, stage: TopKStage) -> PipelineKey {
    let dtypes = match stage {
        TopKStage::Merge => vec![DType::I32, src, DType::I32],
        _ => vec![src, DType::I32],
    };
    PipelineKey {
        kernel: Kernel::TopK { k, argmax, stage },
        dtypes,
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
    let n = a.layout.ne[0];
    if n <= 2 * CHUNK {
        return Ok(vec![Dispatch {
            key: select_key(a.dtype, k, argmax, TopKStage::Whole),
            operands: vec![a, dst],
            op_words: [0; OP_WORDS],
            items: ctx.items(rows)?,
            groups: ctx.grid(rows, 1)?,
        }]);
    }
    let chunks = n.div_ceil(CHUNK);
    let scratch = Operand::scratch(DType::I32, 2 * rows * chunks * u64::from(k))?;
    let mut op = [0; OP_WORDS];
    op[0] = ctx.items(chunks)?;
    op[1] = ctx.items(CHUNK)?;
    Ok(vec![
        Dispatch {
            key: select_key(a.dtype, k, argmax, TopKStage::Chunks),
            operands: vec![a.clone(), scratch.clone()],
            op_words: op,
            items: ctx.items(rows)?,
            groups: ctx.grid(rows * chunks, 1)?,
        },
        Dispatch {
            key: select_key(a.dtype, k, argmax, TopKStage::Merge),
            operands: vec![scratch, a, dst],
            op_words: op,
            items: ctx.items(rows)?,
            groups: ctx.grid(rows, 1)?,
        },
    ])
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
    let stages = [TopKStage::Whole, TopKStage::Chunks, TopKStage::Merge];
    for t in [DType::F32, DType::F16, DType::BF16] {
        for stage in stages {
            keys.push(select_key(t, 1, true, stage));
            for k in [1, 5, 40, MAX_K] {
                keys.push(select_key(t, k, false, stage));
            }
        }
    }
    keys
}
