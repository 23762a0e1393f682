//! Reductions and sorting (`reduce.wgsl`): sum, sum_rows and cumsum in f32 (f32 accumulation;
//! the CPU reference accumulates in f64, see the tolerances of the cases), and argsort of f32
//! rows into i32 indices (stable, ascending or descending) by a bitonic sort in workgroup memory,
//! for rows whose power-of-two padding fits the device's workgroup storage.

use wgllm_core::op::SortOrder;
use wgllm_core::{DType, Result};

use super::{Ctx, Dispatch};
use crate::kernels::ReduceKind;
use crate::kernels::{Kernel, PipelineKey, OP_WORDS};

/// Invocations per workgroup (a power of two: the reductions halve it).
const WG: u32 = 256;
/// Smallest sort array, so short rows share one pipeline.
const MIN_SORT_N: u32 = 64;

fn key(kind: ReduceKind) -> PipelineKey {
    let out = match kind {
        ReduceKind::ArgSort { .. } => DType::I32,
        _ => DType::F32,
    };
    PipelineKey {
        kernel: Kernel::Reduce(kind),
        dtypes: vec![DType::F32, out],
        wg: WG,
    }
}

/// One workgroup per row of source 0 (or a single one for `Sum`).
fn rows(ctx: &Ctx, kind: ReduceKind, op_words: [u32; OP_WORDS]) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    let n = match kind {
        ReduceKind::Sum => 1,
        _ => a.layout.nrows(),
    };
    Ok(vec![Dispatch {
        key: key(kind),
        operands: vec![a, dst],
        op_words,
        items: ctx.items(n)?,
        groups: ctx.grid(n, 1)?,
    }])
}

fn f32_in_out(ctx: &Ctx) -> Result<()> {
    ctx.require(
        ctx.src(0)?.dtype == DType::F32 && ctx.out().dtype == DType::F32,
        "f32",
    )
}

/// ggml_sum (one workgroup reads every element).
pub(super) fn sum(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    f32_in_out(ctx)?;
    rows(ctx, ReduceKind::Sum, [0; OP_WORDS])
}

/// ggml_sum_rows.
pub(super) fn sum_rows(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    f32_in_out(ctx)?;
    rows(ctx, ReduceKind::SumRows, [0; OP_WORDS])
}

/// ggml_cumsum.
pub(super) fn cumsum(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    f32_in_out(ctx)?;
    rows(ctx, ReduceKind::CumSum, [0; OP_WORDS])
}

/// ggml_argsort.
pub(super) fn argsort(ctx: &Ctx, order: SortOrder) -> Result<Vec<Dispatch>> {
    let a = ctx.src(0)?;
    ctx.require(
        a.dtype == DType::F32 && ctx.out().dtype == DType::I32,
        "f32 rows into i32 indices",
    )?;
    let n = a.layout.ne[0];
    let slots = n.next_power_of_two().max(u64::from(MIN_SORT_N));
    // The sort array is the kernel's only workgroup storage.
    let bytes = 4 * slots;
    let limit = u64::from(ctx.caps.limits.max_compute_workgroup_storage_size);
    if bytes > limit {
        return Err(ctx.unsupported(format!(
            "argsort of {n}-value rows needs {bytes} bytes of workgroup storage, over this device's {limit}"
        )));
    }
    let mut op = [0; OP_WORDS];
    op[0] = u32::from(order == SortOrder::Desc);
    rows(
        ctx,
        ReduceKind::ArgSort {
            n: ctx.items(slots)?,
        },
        op,
    )
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys: Vec<PipelineKey> = [ReduceKind::Sum, ReduceKind::SumRows, ReduceKind::CumSum]
        .into_iter()
        .map(key)
        .collect();
    keys.extend([64, 1024, 4096].map(|n| key(ReduceKind::ArgSort { n })));
    keys
}
