//! Neural-network ops: gated linear units (`glu.wgsl`), row normalizations (`norm.wgsl`),
//! soft_max with mask, ALiBi and sinks (`softmax.wgsl`), RoPE in every mode (`rope.wgsl`).

use std::f32::consts::PI;

use wgllm_core::op::{GluOp, RopeMode, RopeParams};
use wgllm_core::{DType, Layout, Result};

use super::{words, Ctx, Dispatch, Operand, WG_ELEMENTWISE};
use crate::kernels::{Kernel, NormKind, PipelineKey, OP_WORDS};

/// Invocations per workgroup of the one-workgroup-per-row kernels. A decode step normalizes a
/// single row with one workgroup, whose loop over the row is latency-bound: 256 lanes cut a
/// 4096-wide row to 16 trips (bench/results/HISTORY.md, "row-kernel workgroups").
const WG_ROW: u32 = 256;

/// The WGSL expression of a gate over `x` (gated) and `g` (linear), helpers in
/// `activations.wgsl` and `glu.wgsl`, and its parameters.
pub(super) fn glu_expr(op: GluOp) -> (&'static str, Vec<f32>) {
    let e = match op {
        GluOp::Reglu => "select(0.0, x * g, x > 0.0)",
        GluOp::Geglu => "gelu(x) * g",
        GluOp::Swiglu => "x / (1.0 + exp(-x)) * g",
        GluOp::SwigluOai { alpha, limit } => {
            return ("swiglu_oai(x, g, op_f(0u), op_f(1u))", vec![alpha, limit])
        }
        GluOp::GegluErf => "0.5 * x * (1.0 + erf(x * 0.70710678118654752)) * g",
        GluOp::GegluQuick => "x * sigmoid(1.702 * x) * g",
    };
    (e, vec![])
}

fn glu_key(expr: &'static str, dtype: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Glu { expr },
        dtypes: vec![dtype; 3],
        wg: WG_ELEMENTWISE,
    }
}

/// Half `h` (0 or 1) of each row of `a`, `nc` values wide.
fn half(a: &Operand, nc: u64, h: u64) -> Operand {
    let mut ne = a.layout.ne;
    ne[0] = nc;
    Operand {
        tensor: a.tensor,
        dtype: a.dtype,
        layout: Layout {
            ne,
            nb: a.layout.nb,
            offset: a.layout.offset + h * nc * a.layout.nb[0],
        },
    }
}

/// ggml_glu (`srcs = [a]`, halves of each row) and ggml_glu_split (`srcs = [a, b]`).
pub(super) fn glu(ctx: &Ctx, op: GluOp, swapped: bool) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    ctx.require(
        matches!(dst.dtype, DType::F32 | DType::F16) && a.dtype == dst.dtype,
        "f32 or f16",
    )?;
    ctx.require_f16(&[dst.dtype])?;
    let (x, g) = match ctx.node.opt_src(1) {
        Some(_) => (a, ctx.src(1)?),
        None => {
            let nc = dst.layout.ne[0];
            let (hx, hg) = if swapped { (1, 0) } else { (0, 1) };
            (half(&a, nc, hx), half(&a, nc, hg))
        }
    };
    let (expr, params) = glu_expr(op);
    let n = dst.layout.nelements();
    let key = glu_key(expr, dst.dtype);
    Ok(vec![ctx.per_item(
        key,
        vec![x, g, dst],
        words(&params),
        n,
    )?])
}

/// Invocations of a norm workgroup on a CPU adapter ([`crate::KernelShapes`]): one SIMD group
/// or two, where 256 lanes cost 32-64 coroutines (bench/results/HISTORY.md, "row-kernel
/// workgroups").
const CPU_WG_ROW: u32 = 8;

/// A norm's values a lane keeps in registers and its lanes: enough for rows of `n` (up to 16,
/// 4096 values at 256 lanes; longer rows stream the rest).
fn norm_shape(ctx: &Ctx, n: u64) -> (u32, u32) {
    let wg = match ctx.caps.cpu_shapes {
        true => CPU_WG_ROW,
        false => WG_ROW,
    };
    (n.div_ceil(u64::from(wg)).clamp(1, 16) as u32, wg)
}

fn norm_key(kind: NormKind, mul: bool, (vpl, wg): (u32, u32)) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Norm {
            kind,
            mul,
            vpl,
            pair: false,
        },
        dtypes: vec![DType::F32; 2 + usize::from(mul)],
        wg,
    }
}

fn norm_pair_key(kind: NormKind, (vpl, wg): (u32, u32)) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Norm {
            kind,
            mul: true,
            vpl,
            pair: true,
        },
        dtypes: vec![DType::F32; 6],
        wg,
    }
}

/// One workgroup per row of `src`.
fn per_row(
    ctx: &Ctx,
    key: PipelineKey,
    operands: Vec<Operand>,
    op_words: [u32; OP_WORDS],
) -> Result<Dispatch> {
    let rows = operands[0].layout.nrows();
    Ok(Dispatch {
        key,
        operands,
        op_words,
        items: ctx.items(rows)?,
        groups: ctx.grid(rows, 1)?,
    })
}

/// ggml_rms_norm, ggml_norm, ggml_l2_norm.
pub(super) fn norm(ctx: &Ctx, kind: NormKind, eps: f32) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    ctx.require(a.dtype == DType::F32 && dst.dtype == DType::F32, "f32")?;
    Ok(vec![per_row(
        ctx,
        norm_key(kind, false, norm_shape(ctx, a.layout.ne[0])),
        vec![a, dst],
        words(&[eps]),
    )?])
}

/// A row normalization `norm` (its node's context) followed by ggml_mul by `weight`, whose
/// result is `dst`, in one dispatch: the caller (`fuse.rs`) has checked that the weight is one
/// f32 row of the normalized extent.
pub(super) fn norm_mul(
    norm: &Ctx,
    kind: NormKind,
    eps: f32,
    weight: Operand,
    dst: Operand,
) -> Result<Vec<Dispatch>> {
    let a = norm.src(0)?;
    norm.require(a.dtype == DType::F32 && dst.dtype == DType::F32, "f32")?;
    Ok(vec![per_row(
        norm,
        norm_key(kind, true, norm_shape(norm, a.layout.ne[0])),
        vec![a, weight, dst],
        words(&[eps]),
    )?])
}

/// Two norms × weights of one `kind` and `eps` in one dispatch (`norm.wgsl` with PAIR): for
/// each, the norm (its context), its weight row and its result.
pub(super) fn norm_mul_pair(
    (na, wa, da): (&Ctx, Operand, Operand),
    (nb, wb, db): (&Ctx, Operand, Operand),
    kind: NormKind,
    eps: f32,
) -> Result<Option<Vec<Dispatch>>> {
    let (xa, xb) = (na.src(0)?, nb.src(0)?);
    let all_f32 = [&xa, &wa, &da, &xb, &wb, &db]
        .iter()
        .all(|o| o.dtype == DType::F32);
    if !all_f32 {
        return Ok(None);
    }
    let (ra, rb) = (xa.layout.nrows(), xb.layout.nrows());
    let shape = norm_shape(na, xa.layout.ne[0].max(xb.layout.ne[0]));
    let mut op = words(&[eps]);
    op[1] = na.items(ra)?;
    Ok(Some(vec![Dispatch {
        key: norm_pair_key(kind, shape),
        operands: vec![xa, wa, xb, wb, da, db],
        op_words: op,
        items: na.items(ra + rb)?,
        groups: na.grid(ra + rb, 1)?,
    }]))
}

fn soft_max_key(mask: Option<DType>, sinks: bool) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::SoftMax {
            mask: mask.is_some(),
            sinks,
        },
        dtypes: vec![
            DType::F32,
            mask.unwrap_or(DType::F32),
            DType::F32,
            DType::F32,
        ],
        wg: WG_ROW,
    }
}

/// ggml_soft_max_ext: `srcs = [a, mask?, sinks?]`.
pub(super) fn soft_max(ctx: &Ctx, scale: f32, max_bias: f32) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    let mask = ctx.node.opt_src(1).map(|_| ctx.src(1)).transpose()?;
    let sinks = ctx.node.opt_src(2).map(|_| ctx.src(2)).transpose()?;
    ctx.require(
        a.dtype == DType::F32
            && mask
                .as_ref()
                .is_none_or(|m| matches!(m.dtype, DType::F32 | DType::F16))
            && sinks.as_ref().is_none_or(|s| s.dtype == DType::F32),
        "f32 input and sinks, f32 or f16 mask",
    )?;
    if let Some(m) = &mask {
        ctx.require_f16(&[m.dtype])?;
    }
    let n_head = a.layout.ne[2].max(1);
    let n_head_log2 = 1u64 << n_head.ilog2();
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    let mut op = words(&[scale, max_bias, m0, m1]);
    op[4] = ctx.items(n_head_log2)?;
    let key = soft_max_key(mask.as_ref().map(|m| m.dtype), sinks.is_some());
    let operands = vec![
        a.clone(),
        mask.unwrap_or_else(|| Operand::absent(0)),
        sinks.unwrap_or_else(|| Operand::absent(1)),
        dst,
    ];
    Ok(vec![per_row(ctx, key, operands, op)?])
}

/// `kv`: the index and cache dtypes of a pair that stores k and v into caches.
fn rope_key(
    mode: RopeMode,
    freq_factors: bool,
    dtype: DType,
    pair: bool,
    kv: Option<(DType, DType)>,
) -> PipelineKey {
    let mut dtypes = vec![
        dtype,
        DType::I32,
        if freq_factors { DType::F32 } else { dtype },
        dtype,
    ];
    match (pair, kv) {
        (true, Some((idx, cache))) => dtypes.extend([dtype, idx, dtype, cache, cache]),
        (true, None) => dtypes.extend([dtype, dtype]),
        _ => {}
    }
    PipelineKey {
        kernel: Kernel::Rope {
            mode,
            freq_factors,
            pair,
            kv: pair && kv.is_some(),
        },
        dtypes,
        wg: WG_ELEMENTWISE,
    }
}

/// ggml_rope_yarn_corr_dims: the pair dims YaRN ramps between.
fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let nd = p.n_dims as f32;
    let dim = |rotations: f32| {
        nd * (p.n_ctx_orig as f32 / (rotations * 2.0 * PI)).ln() / (2.0 * p.freq_base.ln())
    };
    [
        dim(p.beta_fast).floor().max(0.0),
        dim(p.beta_slow).ceil().min(nd - 1.0),
    ]
}

/// ggml_rope_ext and ggml_rope_multi in every mode: `srcs = [x, positions, freq_factors?]`.
pub(super) fn rope(ctx: &Ctx, p: &RopeParams) -> Result<Vec<Dispatch>> {
    let (x, pos, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    let ff = ctx.node.opt_src(2).map(|_| ctx.src(2)).transpose()?;
    let (op, slots) = rope_words(ctx, p, &x, &pos, &dst, ff.as_ref())?;
    let key = rope_key(p.mode, ff.is_some(), x.dtype, false, None);
    let items = slots * x.layout.nrows();
    let operands = vec![x, pos, ff.unwrap_or_else(|| Operand::absent(0)), dst];
    Ok(vec![ctx.per_item(key, operands, op, items)?])
}

/// The rope nodes `q` and `k` (their contexts: the same positions, frequency factors and
/// parameters, f32, normal or neox mode) in one dispatch; `None` when they do not qualify.
pub(super) fn rope_pair(q: &Ctx, k: &Ctx, p: &RopeParams) -> Result<Option<Vec<Dispatch>>> {
    rope_pair_with(q, k, p, None)
}

/// [`rope_pair`], with k and v stored into caches when `kv` is given.
fn rope_pair_with(
    q: &Ctx,
    k: &Ctx,
    p: &RopeParams,
    kv: Option<KvStore>,
) -> Result<Option<Vec<Dispatch>>> {
    let same = q.node.src(1)? == k.node.src(1)?
        && q.node.opt_src(2) == k.node.opt_src(2)
        && q.node.op == k.node.op;
    let (xq, xk) = (q.src(0)?, k.src(0)?);
    let f32s = [&xq, &xk, &q.out(), &k.out()]
        .iter()
        .all(|o| o.dtype == DType::F32);
    if !same || !f32s || !matches!(p.mode, RopeMode::Normal | RopeMode::Neox) {
        return Ok(None);
    }
    let (pos, ff) = (q.src(1)?, q.node.opt_src(2).map(|_| q.src(2)).transpose()?);
    let (mut op, slots) = rope_words(q, p, &xq, &pos, &q.out(), ff.as_ref())?;
    // Both tensors rotate the same rows' worth of slots (same head size).
    if xk.layout.ne[0] != xq.layout.ne[0] {
        return Ok(None);
    }
    let first = slots * xq.layout.nrows();
    op[8] = q.items(first)?;
    let stored = kv.as_ref().map(|s| (s.idx.dtype, s.cache_k.dtype));
    let key = rope_key(p.mode, ff.is_some(), DType::F32, true, stored);
    let mut operands = vec![
        xq,
        pos,
        ff.unwrap_or_else(|| Operand::absent(0)),
        q.out(),
        xk.clone(),
    ];
    let second = slots * xk.layout.nrows();
    let mut items = first + second;
    match kv {
        None => operands.push(k.out()),
        Some(s) => {
            // Then two values of v per item.
            op[9] = q.items(second)?;
            let [row, n, _, _] = s.v.layout.ne;
            items += n * row.div_ceil(2);
            operands.extend([s.idx, s.v, s.cache_k, s.cache_v]);
        }
    }
    Ok(Some(vec![q.per_item(key, operands, op, items)?]))
}

/// The rope pair of `q` and `k` (contexts) whose k result only the set_rows `ck` reads (through
/// a reshape to rows of `head_dim · heads`), and the set_rows `cv` of v with the same row
/// indices, as one dispatch that rotates q, writes the rotated k rows into `ck`'s cache and v's
/// rows into `cv`'s: f32 q, k, v, f32 or f16 caches of one dtype; `None` when they do not
/// qualify or the device binds fewer than 9 storage buffers per kernel.
pub(super) fn rope_kv(
    q: &Ctx,
    k: &Ctx,
    ck: &Ctx,
    cv: &Ctx,
    p: &RopeParams,
) -> Result<Option<Vec<Dispatch>>> {
    let (xk, rows_k, idx, v) = (k.src(0)?, ck.src(1)?, cv.src(2)?, cv.src(1)?);
    let (cache_k, cache_v) = (ck.out(), cv.out());
    let [hd, heads, n, _] = xk.layout.ne;
    let plain = |o: &Operand| o.layout.ne[2] == 1 && o.layout.ne[3] == 1;
    let ok = ck.node.src(2)? == cv.node.src(2)?
        && k.out().layout.is_contiguous(DType::F32)
        && xk.layout.ne[3] == 1
        && rows_k.layout.ne == [hd * heads, n, 1, 1]
        && v.dtype == DType::F32
        && v.layout.ne == [hd * heads, n, 1, 1]
        && matches!(idx.dtype, DType::I32 | DType::I64)
        && idx.layout.ne == [n, 1, 1, 1]
        && cache_k.dtype == cache_v.dtype
        && matches!(cache_k.dtype, DType::F32 | DType::F16)
        && (cache_k.dtype == DType::F32 || q.caps.shader_f16)
        && [&cache_k, &cache_v]
            .iter()
            .all(|c| plain(c) && c.layout.ne[0] == hd * heads)
        && q.caps.limits.max_storage_buffers_per_shader_stage >= 9;
    if !ok {
        return Ok(None);
    }
    let store = KvStore {
        idx,
        v,
        cache_k,
        cache_v,
    };
    rope_pair_with(q, k, p, Some(store))
}

/// What a rope pair that stores k and v into caches binds besides q and k.
struct KvStore {
    idx: Operand,
    v: Operand,
    cache_k: Operand,
    cache_v: Operand,
}

/// What `rope_angle.wgsl` reads of `p`: freq_scale, ext_factor, attn_factor, the YaRN
/// correction dims (low, high), and theta_scale.
pub(super) fn rope_angle_words(p: &RopeParams) -> [f32; 6] {
    let [low, high] = yarn_corr_dims(p);
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    [
        p.freq_scale,
        p.ext_factor,
        p.attn_factor,
        low,
        high,
        theta_scale,
    ]
}

/// rope.wgsl's parameter words for `p` over `x`, and its slots per row.
fn rope_words(
    ctx: &Ctx,
    p: &RopeParams,
    x: &Operand,
    pos: &Operand,
    dst: &Operand,
    ff: Option<&Operand>,
) -> Result<([u32; OP_WORDS], u64)> {
    ctx.require(
        matches!(x.dtype, DType::F32 | DType::F16)
            && dst.dtype == x.dtype
            && pos.dtype == DType::I32
            && ff.as_ref().is_none_or(|f| f.dtype == DType::F32),
        "f32 or f16 x, i32 positions, f32 frequency factors",
    )?;
    ctx.require_f16(&[x.dtype])?;
    let ne0 = x.layout.ne[0];
    // Rotated elements: n_dims, or the whole head in the vision mode (n_dims = head_dim / 2).
    let rot = match p.mode {
        RopeMode::Vision => 2 * u64::from(p.n_dims),
        _ => u64::from(p.n_dims),
    };
    if rot > ne0 {
        return Err(ctx.unsupported(format!("{rot} rotated elements in rows of {ne0}")));
    }
    let slots = rot / 2 + (ne0 - rot).div_ceil(2);
    let mut angle = vec![0.0, 0.0];
    angle.extend(rope_angle_words(p));
    let mut op = words(&angle);
    op[0] = ctx.items(rot)?;
    op[1] = ctx.items(slots)?;
    op[8..12].copy_from_slice(&p.sections);
    Ok((op, slots))
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let glus = [
        GluOp::Reglu,
        GluOp::Geglu,
        GluOp::Swiglu,
        GluOp::SwigluOai {
            alpha: 0.0,
            limit: 0.0,
        },
        GluOp::GegluErf,
        GluOp::GegluQuick,
    ];
    let mut keys = Vec::new();
    for d in [DType::F32, DType::F16] {
        keys.extend(glus.iter().map(|&op| glu_key(glu_expr(op).0, d)));
        for mode in [
            RopeMode::Normal,
            RopeMode::Neox,
            RopeMode::MultiSection,
            RopeMode::InterleavedMultiSection,
            RopeMode::Vision,
        ] {
            for ff in [false, true] {
                keys.push(rope_key(mode, ff, d, false, None));
                if d == DType::F32 && matches!(mode, RopeMode::Normal | RopeMode::Neox) {
                    keys.push(rope_key(mode, ff, d, true, None));
                    for idx in [DType::I32, DType::I64] {
                        for cache in [DType::F32, DType::F16] {
                            keys.push(rope_key(mode, ff, d, true, Some((idx, cache))));
                        }
                    }
                }
            }
        }
    }
    for mul in [false, true] {
        for shape in [(1, WG_ROW), (3, WG_ROW), (16, WG_ROW), (16, CPU_WG_ROW)] {
            keys.extend(
                [NormKind::Rms, NormKind::Norm, NormKind::L2].map(|k| norm_key(k, mul, shape)),
            );
            if mul {
                keys.extend([NormKind::Rms, NormKind::Norm].map(|k| norm_pair_key(k, shape)));
            }
        }
    }
    for mask in [None, Some(DType::F32), Some(DType::F16)] {
        for sinks in [false, true] {
            keys.push(soft_max_key(mask, sinks));
        }
    }
    keys
}
