//! Row gathers and scatters: get_rows (any table dtype the kernels decode, quantized blocks
//! included) and set_rows (f32 rows into f32, f16, q8_0 or q4_0 tables, i32 or i64 indices;
//! quantized rows are encoded in the kernel, one invocation per 32-value block).

use wgllm_core::{DType, Result};

use super::{windows, Ctx, Dispatch, WG_ELEMENTWISE};
use crate::kernels::{Kernel, PipelineKey, OP_WORDS, QUANTS};

/// Destination dtypes set_rows writes.
const SET_ROWS_DST: [DType; 4] = [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0];

/// Table dtypes get_rows reads into f32.
fn get_rows_table(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16) || QUANTS.contains(&d)
}

fn get_rows_key(table: DType, out: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::GetRows,
        dtypes: vec![table, DType::I32, out],
        wg: WG_ELEMENTWISE,
    }
}

fn set_rows_key(idx: DType, dst: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::SetRows,
        dtypes: vec![DType::F32, idx, dst],
        wg: WG_ELEMENTWISE,
    }
}

/// ggml_get_rows: `srcs = [table, idx]`.
pub(super) fn get_rows(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (table, idx, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    let ok = (get_rows_table(table.dtype) && dst.dtype == DType::F32
        || table.dtype == DType::I32 && dst.dtype == DType::I32)
        && idx.dtype == DType::I32;
    ctx.require(
        ok,
        "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K, q8_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs, mxfp4 tables into f32; i32 into i32; i32 indices",
    )?;
    ctx.require_f16(&[table.dtype])?;
    let n = dst.layout.nelements();
    let key = get_rows_key(table.dtype, dst.dtype);
    // One dispatch per window of table rows (one unless the table is over the binding limit).
    windows::row_windows(ctx, &table)?
        .into_iter()
        .map(|w| {
            let mut op = [0; OP_WORDS];
            op[0] = ctx.items(w.first_row)?;
            ctx.per_item(
                key.clone(),
                vec![w.operand, idx.clone(), dst.clone()],
                op,
                n,
            )
        })
        .collect()
}

/// ggml_set_rows: `srcs = [dst, src, idx]`, in place into dst's storage.
pub(super) fn set_rows(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (src, idx, dst) = (ctx.src(1)?, ctx.src(2)?, ctx.out());
    ctx.require(
        src.dtype == DType::F32
            && SET_ROWS_DST.contains(&dst.dtype)
            && matches!(idx.dtype, DType::I32 | DType::I64),
        "f32 rows into f32, f16, q8_0 or q4_0, with i32 or i64 indices",
    )?;
    ctx.require_f16(&[dst.dtype])?;
    // One work item per value, or per block of a quantized destination.
    let n = src.layout.nelements() / dst.dtype.block_size() as u64;
    let key = set_rows_key(idx.dtype, dst.dtype);
    Ok(vec![ctx.per_item(
        key,
        vec![src, idx, dst],
        [0; OP_WORDS],
        n,
    )?])
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys: Vec<PipelineKey> = [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
        .map(|t| get_rows_key(t, DType::F32))
        .collect();
    keys.push(get_rows_key(DType::I32, DType::I32));
    for idx in [DType::I32, DType::I64] {
        for dst in SET_ROWS_DST {
            keys.push(set_rows_key(idx, dst));
        }
    }
    keys
}
