//! Row selections: ggml_argmax and ggml_top_k (`top_k.wgsl`: a workgroup reduction for k = 1,
//! a radix select for larger k): one workgroup per row, or for long rows (a vocabulary) one per
//! chunk of `CHUNK` values and then one per row merging the chunks' candidates.

use wgllm_core::{DType, Result};

use super::{Ctx, Dispatch, Operand};
use crate::kernels::{Kernel, PipelineKey, TopKStage, OP_WORDS};

/// Invocations per workgroup (the radix select's 256 bins, one each).
const WG_SELECT: u32 = 256;
/// Largest k: the selection is gathered in workgroup memory and ranked by one invocation each.
const MAX_K: u32 = WG_SELECT;
/// Values per workgroup of a long row's first stage: the 16 per invocation that `top_k.wgsl`
/// keeps in registers (VPL). A merge of up to 64 chunks' candidates (rows up to 262,144 values
/// for k = 64) keeps them all in registers too.
const CHUNK: u64 = 16 * WG_SELECT as u64;

/// `subgroups` matters for k = 1 only (the radix select has no reduction).
fn select_key(src: DType, k: u32, argmax: bool, stage: TopKStage, subgroups: bool) -> PipelineKey {
    let dtypes = match stage {
        TopKStage::Merge => vec![DType::I32, src, DType::I32],
        _ => vec![src, DType::I32],
    };
    PipelineKey {
        kernel: Kernel::TopK {
            k,
            argmax,
            stage,
            subgroups: subgroups && k == 1,
        },
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
    let sg = ctx.caps.subgroups;
    if n <= 2 * CHUNK {
        return Ok(vec![Dispatch {
            key: select_key(a.dtype, k, argmax, TopKStage::Whole, sg),
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
            key: select_key(a.dtype, k, argmax, TopKStage::Chunks, sg),
            operands: vec![a.clone(), scratch.clone()],
            op_words: op,
            items: ctx.items(rows)?,
            groups: ctx.grid(rows * chunks, 1)?,
        },
        Dispatch {
            key: select_key(a.dtype, k, argmax, TopKStage::Merge, sg),
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
        for (stage, sg) in stages.into_iter().flat_map(|s| [(s, false), (s, true)]) {
            keys.push(select_key(t, 1, true, stage, sg));
            keys.push(select_key(t, 1, false, stage, sg));
        }
        for stage in stages {
            for k in [2, 5, 40, 64, MAX_K] {
                keys.push(select_key(t, k, false, stage, false));
            }
        }
    }
    keys
}
