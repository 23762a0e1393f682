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

use super::{windows, Ctx, Dispatch, Operand, MAX_GROUPS_PER_DIM};
use crate::kernels::QUANTS;
use crate::kernels::{Kernel, PipelineKey, OP_WORDS, ROUTER_MAX_EXPERTS};

/// (Slot, token) columns per expert, on average, from which mul_mat_id runs the tiled kernels:
/// the mat-vec reads an expert's weights once per column routed to it, a tile once per 64, but
/// a tile's steps cost the same however few of its columns are routed, so the tiles win only
/// from several columns an expert (bench/results/HISTORY.md, "MoE tiled threshold").
const TILED_COLS_PER_EXPERT: u64 = 8;
/// Invocations of a `moe_route.wgsl` workgroup.
const ROUTE_WG: u32 = 256;
/// Invocations of `moe_router.wgsl`: one per expert for Qwen3-30B-A3B's 128 (each ranks its
/// experts against all of them).
const ROUTER_WG: u32 = 128;

/// Invocations per workgroup (a power of two: the reduction halves it).
const WG: u32 = 64;

fn key(a: DType, b: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MulMatId,
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
    if let Some(d) = super::matmul::mul_mat_vec_id(ctx, None)? {
        return Ok(d);
    }
    let (k, m) = (a.layout.ne[0], a.layout.ne[1]);
    let cols = dst.layout.ne[1] * dst.layout.ne[2];
    Ok(vec![Dispatch {
        key: key(a.dtype, b.dtype),
        operands: vec![a, b, ids, dst],
        op_words: ctx.item_words(&[k, m, cols])?,
        items: ctx.items(m * cols)?,
        groups: ctx.grid(m * cols, 1)?,
    }])
}

/// Whether the mul_mat_id of `ctx` runs the tiled kernels over routed columns
/// ([`mul_mat_id_tiled`]).
pub(super) fn routes_tiled(ctx: &Ctx) -> Result<bool> {
    let (a, b, ids, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    let (ea, eb, ed) = (a.layout.ne, b.layout.ne, dst.layout.ne);
    let (n_exp, cols) = (ea[2], ed[1] * ed[2]);
    Ok(cols >= TILED_COLS_PER_EXPERT * n_exp
        && n_exp < MAX_GROUPS_PER_DIM
        && super::matmul::unit_path(ctx, &a, &b)
        && ea[3] == 1
        && eb[3] == 1
        && windows::fits(ctx, &a)
        && ids.dtype == DType::I32
        && dst.dtype == DType::F32)
}

fn route_key() -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MoeRoute,
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
    if !routes_tiled(ctx)? {
        return Ok(None);
    }
    let (a, b, ids, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    let (ea, ed) = (a.layout.ne, dst.layout.ne);
    let (n_exp, cols) = (ea[2], ed[1] * ed[2]);
    let buckets = n_exp + 1;
    let routes = Operand::scratch(DType::I32, buckets * (1 + cols))?;
    let route = Dispatch {
        key: route_key(),
        operands: vec![ids, routes.clone()],
        op_words: ctx.item_words(&[n_exp, cols])?,
        items: ctx.items(cols)?,
        groups: ctx.grid(buckets, 1)?,
    };
    let (key, bm, bn) = super::matmul::id_tile(ctx, &a);
    let (tiles_m, tiles_n) = (ea[1].div_ceil(bm), ed[2].div_ceil(bn));
    let product = Dispatch {
        key,
        operands: vec![a, b, routes, dst],
        op_words: ctx.item_words(&[ea[0], ea[1], cols, n_exp, 0, tiles_m, tiles_n])?,
        items: ctx.items(ed[0] * cols)?,
        groups: ctx.grid(tiles_m * tiles_n, buckets)?,
    };
    Ok(Some(vec![route, product]))
}

fn sum_key(residual: bool) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MoeSum { residual },
        dtypes: vec![DType::F32; 3 + usize::from(residual)],
        wg: super::WG_ELEMENTWISE,
    }
}

/// The weighted sum of a mixture of experts' outputs, plus `residual` when given, into `dst`
/// [n_embd, n_tokens] (the `fuse.rs` pattern): `x` the `mul` of the outputs [n_embd, n_used,
/// n_tokens] (its source 0) and their weights [1, n_used, n_tokens] (source 1), all f32.
pub(super) fn expert_sum(
    x: &Ctx,
    residual: Option<Operand>,
    dst: Operand,
) -> Result<Option<Vec<Dispatch>>> {
    let (e, w) = (x.src(0)?, x.src(1)?);
    let (ee, ew) = (e.layout.ne, w.layout.ne);
    let r_ok = residual
        .as_ref()
        .is_none_or(|r| r.dtype == DType::F32 && r.layout.ne == dst.layout.ne);
    let ok = [e.dtype, w.dtype, dst.dtype] == [DType::F32; 3]
        && ew == [1, ee[1], ee[2], 1]
        && ee[3] == 1
        && dst.layout.ne == [ee[0], ee[2], 1, 1]
        && r_ok;
    if !ok {
        return Ok(None);
    }
    let key = sum_key(residual.is_some());
    let operands = [e, w].into_iter().chain(residual).chain([dst]).collect();
    let n = ee[0] * ee[2];
    Ok(Some(vec![x.per_item(key, operands, [0; OP_WORDS], n)?]))
}

fn router_key(subgroups: bool) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MoeRouter { subgroups },
        dtypes: vec![DType::F32, DType::I32, DType::F32],
        wg: ROUTER_WG,
    }
}

/// A mixture-of-experts router (the `fuse.rs` pattern): the softmax `probs` of the router
/// logits (its context), its top `k` into `ids` [k, n_tokens] and their probabilities (with
/// `norm` divided by their sum) into `dst` ([k, n_tokens] or [1, k, n_tokens]), one workgroup
/// per token.
pub(super) fn router(
    probs: &Ctx,
    ids: Operand,
    dst: Operand,
    (k, norm): (u32, bool),
) -> Result<Option<Vec<Dispatch>>> {
    let logits = probs.src(0)?;
    let [n_exp, tokens, ..] = logits.layout.ne;
    // dst's strides along the slots and the tokens, in elements.
    let (l, f) = (&dst.layout, 4);
    let strides = match l.ne {
        [1, s, t, 1] if s == u64::from(k) && t == tokens => (l.nb[1] / f, l.nb[2] / f),
        [s, t, 1, 1] if s == u64::from(k) && t == tokens => (l.nb[0] / f, l.nb[1] / f),
        _ => return Ok(None),
    };
    let ok = logits.dtype == DType::F32
        && logits.layout.ne[2..] == [1, 1]
        && n_exp <= u64::from(ROUTER_MAX_EXPERTS)
        && ids.dtype == DType::I32
        && ids.layout.ne == [u64::from(k), tokens, 1, 1]
        && dst.dtype == DType::F32;
    if !ok {
        return Ok(None);
    }
    let words = [n_exp, u64::from(k), u64::from(norm), strides.0, strides.1];
    Ok(Some(vec![Dispatch {
        key: router_key(probs.caps.subgroups),
        operands: vec![logits, ids, dst],
        op_words: probs.item_words(&words)?,
        items: probs.items(tokens)?,
        groups: probs.grid(tokens, 1)?,
    }]))
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
    keys.extend([sum_key(false), sum_key(true)]);
    keys.extend([router_key(false), router_key(true)]);
    keys
}

#[cfg(test)]
mod tests {
    use wgllm_core::op::{BinaryOp, GluOp};
    use wgllm_core::{DType, Graph};

    use crate::kernels::{Kernel, VecEpilogue};
    use crate::ops::planned_kernels;

    /// `moe_ffn`'s weighting and sum of 8 experts' outputs, and the residual added to it,
    /// plans as one `moe_sum.wgsl` dispatch; with a slot's view also an output, as the mul
    /// and its 7 adds.
    #[test]
    fn the_weighted_sum_of_experts_is_one_dispatch() {
        let kernels = |slot_out: bool, residual: bool| {
            let mut g = Graph::new();
            let x = g.input("x", DType::F32, [64, 8, 3, 1]).unwrap();
            let w = g.input("w", DType::F32, [1, 8, 3, 1]).unwrap();
            let y = g.mul(x, w).unwrap();
            let nb = g.node(y).layout.nb;
            let slot = |g: &mut Graph, i: u64| {
                g.view(y, [64, 3, 1, 1], [nb[0], nb[2], nb[3], nb[3]], i * nb[1])
                    .unwrap()
            };
            let mut r = slot(&mut g, 0);
            for i in 1..8 {
                let v = slot(&mut g, i);
                r = g.add(r, v).unwrap();
            }
            if residual {
                let h = g.input("h", DType::F32, [64, 3, 1, 1]).unwrap();
                r = g.add(r, h).unwrap();
            }
            g.mark_output(r).unwrap();
            if slot_out {
                let v = slot(&mut g, 1);
                g.mark_output(v).unwrap();
            }
            planned_kernels(&g)
        };
        let sum = |residual| vec![Kernel::MoeSum { residual }];
        assert_eq!(kernels(false, false), sum(false));
        assert_eq!(kernels(false, true), sum(true));
        assert_eq!(kernels(true, false).len(), 8);
    }

    /// `moe_ffn`'s router (softmax, top-k, the picked probabilities renormalized) plans as one
    /// `moe_router.wgsl` dispatch, without the renormalization too; with the softmax also an
    /// output, as its five.
    #[test]
    fn the_router_is_one_dispatch() {
        let kernels = |norm: bool, probs_out: bool| {
            let mut g = Graph::new();
            let logits = g.input("logits", DType::F32, [128, 3, 1, 1]).unwrap();
            let probs = g.soft_max(logits, None, None, 1.0, 0.0).unwrap();
            let picked = g.top_k(probs, 8).unwrap();
            let rows = g.reshape(probs, [1, 128, 3, 1]).unwrap();
            let mut w = g.get_rows(rows, picked).unwrap();
            if norm {
                let r = g.reshape(w, [8, 3, 1, 1]).unwrap();
                let sum = g.sum_rows(r).unwrap();
                w = g.binary(r, sum, BinaryOp::Div).unwrap();
            }
            g.mark_output(w).unwrap();
            g.mark_output(picked).unwrap();
            if probs_out {
                g.mark_output(probs).unwrap();
            }
            planned_kernels(&g)
        };
        let router = vec![Kernel::MoeRouter { subgroups: true }];
        assert_eq!(kernels(true, false), router);
        assert_eq!(kernels(false, false), router);
        assert_eq!(kernels(true, true).len(), 5);
    }

    /// A decode step's gate and up mul_mat_id and their GLU plan as one mat-vec (ID and GLU);
    /// a prefill's, routed to the tiled kernels, stay three products and a GLU.
    #[test]
    fn gate_and_up_experts_fuse_with_their_glu_in_decode() {
        let kernels = |tokens: u64| {
            let mut g = Graph::new();
            let bytes = bytes::Bytes::from(vec![0u8; 144 * 64 * 4]);
            let wg = g.weight("gate", DType::Q4_K, [256, 64, 4, 1], bytes.clone());
            let wu = g.weight("up", DType::Q4_K, [256, 64, 4, 1], bytes);
            let x = g.input("x", DType::F32, [256, 1, tokens, 1]).unwrap();
            let ids = g.input("ids", DType::I32, [2, tokens, 1, 1]).unwrap();
            let gate = g.mul_mat_id(wg.unwrap(), x, ids).unwrap();
            let up = g.mul_mat_id(wu.unwrap(), x, ids).unwrap();
            let r = g.glu_split(gate, up, GluOp::Swiglu).unwrap();
            g.mark_output(r).unwrap();
            planned_kernels(&g)
        };
        let decode = kernels(1);
        assert_eq!(decode.len(), 1, "{decode:?}");
        assert!(matches!(
            decode[0],
            Kernel::MulMatVec {
                epilogue: VecEpilogue::IdGlu { .. },
                ..
            }
        ));
        let prefill = kernels(64);
        assert_eq!(prefill.len(), 5, "{prefill:?}");
        assert!(matches!(prefill[4], Kernel::Glu { .. }));
    }
}
