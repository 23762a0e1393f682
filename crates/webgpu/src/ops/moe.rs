//! Mixture-of-experts products: mul_mat_id with the weight dtypes mul_mat decodes (f32, f16,
//! bf16 and every block format of `quant.wgsl`) against f32 activations, or f16 x f16; f32
//! accumulation and result. Where mul_mat's unit-decoding kernels take the operands:
//! - a product with at least [`TILED_COLS_PER_EXPERT`] (slot, token) columns per expert (a
//!   prefill) runs mul_mat's tiled kernels (`mul_mat_coop.wgsl` or `mul_mat_tiled.wgsl` with
//!   ID) over the columns routed to each expert by `moe_route.wgsl`;
//! - fewer run the mat-vec kernel's ID (`matmul::mul_mat_vec_id`: a workgroup column per
//!   expert slot and token, with activations rounded to int8 by mul_mat's policy over the
//!   experts read).
//!
//! The rest run `mul_mat_id.wgsl`, a workgroup per result element.

use wgllm_core::{DType, Result};

use super::rows::QUANTS;
use super::{windows, Ctx, Dispatch, Operand, MAX_GROUPS_PER_DIM};
use crate::shaders::{Kernel, PipelineKey, OP_WORDS};
use crate::variants::Family;

/// (Slot, token) columns per expert, on average, from which mul_mat_id runs the tiled kernels:
/// the mat-vec reads an expert's weights once per column routed to it, a tile once per 64, but
/// a tile's steps cost the same however few of its columns are routed. On an H200, Qwen3-30B-
/// A3B's gate shape (8 of 128 q4_K experts of 768 × 2048) took the mat-vec 72, 250 and 1,913
/// µs for 16, 64 and 512 tokens (1, 4 and 32 columns an expert), the routed coop tiles 262,
/// 378 and 419: even at about 6 columns an expert.
const TILED_COLS_PER_EXPERT: u64 = 8;
/// Invocations of a `moe_route.wgsl` workgroup.
const ROUTE_WG: u32 = 256;

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
    if let Some(d) = mul_mat_id_tiled(ctx)? {
        return Ok(d);
    }
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

fn route_key() -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Family(Family::MoeRoute),
        dtypes: vec![DType::I32, DType::I32],
        wg: ROUTE_WG,
    }
}

/// mul_mat_id through the tiled kernels (`matmul::id_tile`), or `None` where they do not
/// apply (fewer columns than [`TILED_COLS_PER_EXPERT`] per expert, operands mul_mat's tiles do
/// not take, experts over one binding). `moe_route.wgsl` first buckets the columns by expert
/// into scratch: each bucket's count, then its columns in order (room for every column in
/// every bucket: a token may pick one expert twice). The product's workgroup z is the bucket;
/// its tiles along n cover the tokens (each expert's columns when a token picks an expert
/// once) and step over any more.
fn mul_mat_id_tiled(ctx: &Ctx) -> Result<Option<Vec<Dispatch>>> {
    let (a, b, ids, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    let (ea, eb, ed) = (a.layout.ne, b.layout.ne, dst.layout.ne);
    let (n_exp, cols) = (ea[2], ed[1] * ed[2]);
    let ok = cols >= TILED_COLS_PER_EXPERT * n_exp
        && n_exp < MAX_GROUPS_PER_DIM
        && super::matmul::unit_path(ctx, &a, &b)
        && ea[3] == 1
        && eb[3] == 1
        && windows::fits(ctx, &a)
        && ids.dtype == DType::I32
        && dst.dtype == DType::F32;
    if !ok {
        return Ok(None);
    }
    let buckets = n_exp + 1;
    let routes = Operand::scratch(DType::I32, buckets * (1 + cols))?;
    let mut op = [0; OP_WORDS];
    op[0] = ctx.items(n_exp)?;
    op[1] = ctx.items(cols)?;
    let route = Dispatch {
        key: route_key(),
        operands: vec![ids, routes.clone()],
        op_words: op,
        items: ctx.items(cols)?,
        groups: ctx.grid(buckets, 1)?,
    };
    let (key, bm, bn) = super::matmul::id_tile(ctx, a.dtype);
    let (tiles_m, tiles_n) = (ea[1].div_ceil(bm), ed[2].div_ceil(bn));
    let mut op = [0; OP_WORDS];
    for (i, v) in [ea[0], ea[1], cols, n_exp, 0, tiles_m, tiles_n]
        .into_iter()
        .enumerate()
    {
        op[i] = ctx.items(v)?;
    }
    let product = Dispatch {
        key,
        operands: vec![a, b, routes, dst],
        op_words: op,
        items: ctx.items(ed[0] * cols)?,
        groups: ctx.grid(tiles_m * tiles_n, buckets)?,
    };
    Ok(Some(vec![route, product]))
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys: Vec<PipelineKey> = [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
        .map(|a| key(a, DType::F32))
        .collect();
    keys.push(key(DType::F16, DType::F16));
    keys.push(route_key());
    keys
}
