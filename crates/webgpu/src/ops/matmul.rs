//! Matrix products: mul_mat with weights in f32, f16, bf16 or any block format `quant.wgsl`
//! decodes (decoded in registers, never into a scratch buffer), f32 accumulation, batched with
//! the weight broadcast over the activation's dims 2 and 3; a weight over the binding limit is
//! split into windows of rows (see `windows.rs`).

use wgllm_core::op::{RopeMode, RopeParams};
use wgllm_core::{DType, Layout, Op, Result};

use super::{windows, Ctx, Dispatch, Operand, ABSENT, SCRATCH};
use crate::config::{Int8Activations, INT8_MIN_WEIGHT_BYTES};
use crate::device::Capabilities;
use crate::kernels::QUANTS;
use crate::kernels::{
    int8_activations, job_units, unit_decoded, Kernel, PipelineKey, VecEpilogue, VecSlots, OP_WORDS,
};

/// Invocations per mul_mat workgroup (a power of two: the reduction halves it).
const WG: u32 = 64;
/// Output columns per workgroup.
const TN: u32 = 4;
/// Mat-vec: the column counts compiled (a product with n columns uses the smallest that holds
/// n).
const VEC_COLS: [u32; 4] = [1, 2, 4, 8];
/// Invocations of a `quant_act.wgsl` workgroup, a lane per unit of 32 activations.
const QUANT_ACT_WG: u32 = 64;

fn key(a: DType, b: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MulMat { tn: TN },
        dtypes: vec![a, b, DType::F32],
        wg: WG,
    }
}

fn weight_ok(a: DType) -> bool {
    matches!(a, DType::F32 | DType::F16 | DType::BF16) || QUANTS.contains(&a)
}

/// The parameter words every matmul kernel shares: K, M (rows of this weight window), N, the
/// broadcast ratios r2 = b.ne2 / a.ne2 and r3, and a kernel-specific word 5 (tiles per row or
/// along m; 0 when unused).
fn product_words(
    ctx: &Ctx,
    ea: [u64; 4],
    eb: [u64; 4],
    m: u64,
    w5: u64,
) -> Result<[u32; OP_WORDS]> {
    ctx.item_words(&[ea[0], m, eb[1], eb[2] / ea[2], eb[3] / ea[3], w5])
}

/// ggml_mul_mat: `srcs = [a, b]`, result `[a.ne1, b.ne1, b.ne2, b.ne3]` in f32.
pub(super) fn mul_mat(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        dst.dtype == DType::F32
            && (b.dtype == DType::F32 && weight_ok(a.dtype)
                || b.dtype == DType::F16 && a.dtype == DType::F16),
        "f32 activations with f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K, q8_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs, mxfp4 weights; f16 x f16",
    )?;
    ctx.require_f16(&[a.dtype, b.dtype])?;
    // Activations or results past the binding limit (a vocabulary's logits over a whole
    // prompt) run as slices of whole columns, each its own product.
    let mut out = Vec::new();
    for (b, dst) in windows::column_windows(ctx, &b, &dst)? {
        out.extend(product(ctx, &a, &b, &dst)?);
    }
    Ok(out)
}

/// [`mul_mat`] of operands that fit their bindings, but for the weight's row windows.
fn product(ctx: &Ctx, a: &Operand, b: &Operand, dst: &Operand) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (a.clone(), b.clone(), dst.clone());
    let (ea, eb) = (a.layout.ne, b.layout.ne);
    let n = eb[1];
    if unit_path(ctx, &a, &b) {
        // Formats without a part decoder (`dq` per value: the IQ grids, ...) take the mat-vec
        // for one column only: unrolled over 8 columns, iq1_s's kernel lost the device of
        // Chromium's SwiftShader while compiling.
        let cols = match unit_decoded(a.dtype) {
            true => &VEC_COLS[..],
            false => &VEC_COLS[..1],
        };
        return match cols.iter().copied().find(|&c| u64::from(c) >= n) {
            Some(nc) => mul_mat_vec(ctx, &a, &b, &dst, None, nc, Act::F32(None)),
            None if ctx.caps.cpu_shapes && unit_decoded(a.dtype) => {
                mul_mat_vec_chunks(ctx, &a, &b, &dst)
            }
            None => mul_mat_tiled(ctx, &a, &b, &dst, &CoopEpilogue::default()),
        };
    }
    let tiles = n.div_ceil(u64::from(TN));
    // A weight over the binding limit runs as one dispatch per window of its rows, each writing
    // the matching rows (dim 0) of the result.
    let mut out = Vec::new();
    for w in windows::row_windows(ctx, &a)? {
        let m = w.operand.layout.ne[1];
        let mut d = dst.clone();
        d.layout.ne[0] = m;
        d.layout.offset += w.first_row * d.layout.nb[0];
        let op = product_words(ctx, ea, eb, m, tiles)?;
        out.push(Dispatch {
            key: key(a.dtype, b.dtype),
            operands: vec![w.operand, b.clone(), d],
            op_words: op,
            items: ctx.items(m * n * eb[2] * eb[3])?,
            groups: ctx.grid(m * tiles, eb[2] * eb[3])?,
        });
    }
    Ok(out)
}

/// Whether the unit-decoding kernels (mat-vec for up to 8 activation columns, tiled beyond)
/// apply: f32 activations whose columns are whole vec4s from a 16-byte aligned start (the vec4
/// binding of src1), whole units of 32 weights per row, and f16/bf16 weights starting on whole
/// words.
pub(super) fn unit_path(ctx: &Ctx, a: &Operand, b: &Operand) -> bool {
    let (la, lb) = (&a.layout, &b.layout);
    let f32_ok = b.dtype == DType::F32 && lb.nb[0] == 4 && super::rows_on(ctx, lb, 16);
    let weight_ok = match a.dtype {
        DType::F32 => la.nb[0] == 4,
        DType::F16 | DType::BF16 => la.nb[0] == 2 && super::rows_on(ctx, la, 4),
        d => QUANTS.contains(&d),
    };
    f32_ok && weight_ok && la.ne[0].is_multiple_of(32)
}

/// Whether a mat-vec over weights of `a` holding `bytes` (all its weights) takes int8
/// activations from [`quant_act`]: the device's [`Int8Activations`] policy, a weight with an
/// integer decoder, activations `x` without batches (quant_act's columns are dim 1 only).
/// Decoding eight floats per part and row makes the float path bound by instruction issue, not
/// by weight bytes (bench/results/HISTORY.md, "int8 activation weights"); the activations are
/// rounded to int8 per 32 values, as ggml's CPU and CUDA backends round them to q8_0/q8_1 for
/// the same weights: NMSE ~1e-5 against f32.
fn q8x(ctx: &Ctx, a: DType, bytes: u64, x: &Operand) -> bool {
    // q8_0's float path is already bound by its weight bytes, not by decoding: int8 would only
    // add the rounding dispatch (bench/results/HISTORY.md, "int8 activations for q8_0").
    let wanted = match ctx.caps.int8_activations {
        Int8Activations::Off => false,
        Int8Activations::Large => bytes >= INT8_MIN_WEIGHT_BYTES && a != DType::Q8_0,
        Int8Activations::All => true,
    };
    wanted && int8_activations(a) && x.layout.ne[2] == 1 && x.layout.ne[3] == 1
}

/// Bytes of the weight `w`.
fn weight_bytes(w: &Operand) -> u64 {
    let e = w.layout.ne;
    w.dtype.row_bytes(e[0]).unwrap_or(0) * e[1] * e[2] * e[3]
}

/// The scratch of `cols` columns of `units` units of int8 activations (`quant_act.wgsl`'s
/// layout): 8 words of quants, a scale [and a sum of h² with `norm`] per unit and column.
pub(super) fn q8x_scratch(units: u64, cols: u64, norm: bool) -> Result<Operand> {
    let words = (8 + 1 + u64::from(norm)) * units * cols;
    Operand::scratch(DType::I32, words.next_multiple_of(4))
}

/// With `int8`, the dispatch rounding a Q8X mat-vec's activations `x` (with `norm`: `h · g`
/// and each unit's sum of h²) to int8 per unit of 32 into scratch (`quant_act.wgsl`), pushed to
/// `out`, and the scratch operand the mat-vec then reads in place of `x`; without, nothing.
///
/// The rounding is its own dispatch because every mat-vec workgroup would otherwise read the
/// whole f32 row (4 × the int8 words), more than the weights it shares them with
/// (bench/results/HISTORY.md, "int8 activations").
fn quant_act(
    ctx: &Ctx,
    int8: bool,
    x: &Operand,
    norm: Option<&VecNorm>,
    out: &mut Vec<Dispatch>,
) -> Result<Option<Operand>> {
    if !int8 {
        return Ok(None);
    }
    let (units, cols) = (x.layout.ne[0] / 32, x.layout.ne[1]);
    let scratch = q8x_scratch(units, cols, norm.is_some())?;
    let mut op = [0; OP_WORDS];
    op[0] = ctx.items(units)?;
    op[1] = ctx.items(cols)?;
    let mut operands = match norm {
        Some(nm) => vec![nm.h.clone(), nm.g.clone()],
        None => vec![x.clone()],
    };
    operands.push(scratch.clone());
    let key = PipelineKey {
        kernel: Kernel::QuantAct {
            norm: norm.is_some(),
        },
        dtypes: operands.iter().map(|o| o.dtype).collect(),
        wg: QUANT_ACT_WG,
    };
    out.push(Dispatch {
        key,
        operands,
        op_words: op,
        items: ctx.items(units * cols)?,
        groups: ctx.grid(units.div_ceil(u64::from(QUANT_ACT_WG)), cols)?,
    });
    Ok(Some(scratch))
}

/// The mat-vec pipeline for weights of `a` with rows of `units` units, `m` rows, at most `nc`
/// activation columns; `int8`: int8 activations from [`quant_act`] (Q8X; `a` has an integer
/// decoder).
fn vec_key(
    a: DType,
    nc: u32,
    epilogue: VecEpilogue,
    (units, m, cpu): (u64, u64, Option<u32>),
    int8: bool,
    norm: bool,
) -> PipelineKey {
    let nw = match epilogue {
        VecEpilogue::Glu { .. } | VecEpilogue::IdGlu { .. } => 2,
        _ => 1,
    };
    // A rotated pair's two rows are reduced by one workgroup.
    let min_rpw = match epilogue {
        VecEpilogue::QkvRope { .. } => 2,
        _ => 1,
    };
    // With int8 activations a lane's steps are its jobs of `job_units` units.
    let upj = int8.then(|| job_units(a));
    let (wg, rpw) = vec_shape((units, upj), (m, cpu), nc, nw, u32::from(norm), min_rpw);
    let f = DType::F32;
    let mut dtypes = match epilogue {
        VecEpilogue::None => vec![a, f, f],
        VecEpilogue::Add => vec![a, f, f, f],
        VecEpilogue::Id => vec![a, f, DType::I32, f],
        VecEpilogue::IdGlu { .. } => vec![a, f, a, DType::I32, f],
        VecEpilogue::Glu { .. } => vec![a, f, a, f],
        VecEpilogue::Qkv => vec![a, f, a, a, f, f, f],
        VecEpilogue::QkvRope { freq_factors, .. } => {
            // Positions, [frequency factors,] cache rows; q and the caches (the rows and
            // caches patched by `qkv_rope_key`).
            let mut d = vec![a, f, a, a, DType::I32, DType::I32, f, f, f];
            if freq_factors {
                d.insert(5, f);
            }
            d
        }
    };
    if norm {
        dtypes.insert(VecSlots::new(epilogue, true).g, DType::F32);
    }
    if int8 {
        dtypes[1] = DType::I32;
    }
    PipelineKey {
        kernel: Kernel::MulMatVec {
            nc,
            rpw,
            epilogue,
            q8x: int8,
            norm,
            ro_weights: false,
            wv4: false,
        },
        dtypes,
        wg,
    }
}

/// `key` (a mat-vec's) with its weights bound read-only when every weight operand (the slots
/// [`crate::kernels::read_only`] gives) is a weight leaf and no other operand of the dispatch
/// shares its buffer (a weight's buffer holds only it), and bound as vec4s (`wv4`) when the
/// int8 path of q4_K or q5_K reads them and every weight row starts on a 16-byte boundary (the
/// arena and the binding windows start on the storage offset alignment, a multiple of 16).
fn bind_weights(ctx: &Ctx, mut key: PipelineKey, operands: &[Operand]) -> PipelineKey {
    let set = |key: &mut PipelineKey, on: bool| {
        if let Kernel::MulMatVec { ro_weights, .. } = &mut key.kernel {
            *ro_weights = on;
        }
    };
    set(&mut key, true);
    let mask = crate::kernels::read_only(&key);
    let root =
        |o: &Operand| (o.tensor != SCRATCH && o.tensor != ABSENT).then(|| ctx.graph.root(o.tensor));
    let (ro, rw): (Vec<_>, Vec<_>) = (0..operands.len()).partition(|k| mask & (1 << k) != 0);
    let weights: Vec<_> = ro.iter().map(|&k| root(&operands[k])).collect();
    let ok = weights
        .iter()
        .all(|r| r.is_some_and(|r| ctx.graph.node(r).op == Op::Weight))
        && rw
            .iter()
            .all(|&k| root(&operands[k]).is_none_or(|r| !weights.contains(&Some(r))));
    set(&mut key, ok && mask != 0);
    let aligned = ro
        .iter()
        .all(|&k| super::rows_on(ctx, &operands[k].layout, 16));
    if let Kernel::MulMatVec {
        q8x: true,
        ro_weights: true,
        wv4,
        ..
    } = &mut key.kernel
    {
        *wv4 = matches!(operands[0].dtype, DType::Q4_K | DType::Q5_K) && aligned;
    }
    key
}

/// An RMS norm fused in front of mat-vec products: they take `rms_norm(h, eps) · g` for the
/// activations (see `mul_mat_vec.wgsl`'s NORM).
pub(super) struct VecNorm {
    pub h: Operand,
    pub g: Operand,
    pub eps: f32,
}

impl VecNorm {
    /// Whether the kernel can read h in place of the activations `x` (same extents, the same
    /// vec4 binding) and g as vec4s: one f32 row of x's width from a 16-byte aligned start.
    fn fits(&self, ctx: &Ctx, w: &Operand, x: &Operand) -> bool {
        let g = &self.g.layout;
        self.h.layout.ne == x.layout.ne
            && unit_path(ctx, w, &self.h)
            && self.g.dtype == DType::F32
            && g.ne == [x.layout.ne[0], 1, 1, 1]
            && g.nb[0] == 4
            && g.offset.is_multiple_of(16)
    }

    /// `operands` with h for the activations and g in its slot; `op` with eps.
    fn apply(&self, epilogue: VecEpilogue, operands: &mut Vec<Operand>, op: &mut [u32; OP_WORDS]) {
        operands[1] = self.h.clone();
        operands.insert(VecSlots::new(epilogue, true).g, self.g.clone());
        op[7] = self.eps.to_bits();
    }
}

/// Rows per workgroup of a mat-vec pipeline.
fn vec_rpw(key: &PipelineKey) -> u64 {
    match key.kernel {
        Kernel::MulMatVec { rpw, .. } => u64::from(rpw),
        _ => 1,
    }
}

/// The mat-vec columns of the mul_mat nodes `q`, `k`, `v` (their contexts) as one dispatch: the
/// same activation (at most 8 columns, no batches), weights of one dtype with a part decoder
/// and one row length, each fitting a binding; `None` when they do not qualify.
fn qkv_cols(q: &Ctx, k: &Ctx, v: &Ctx, norm: Option<&VecNorm>) -> Result<Option<u32>> {
    let x = q.src(1)?;
    let (wq, wk, wv) = (q.src(0)?, k.src(0)?, v.src(0)?);
    let n = x.layout.ne[1];
    let plain = |o: &Operand| o.layout.ne[2] == 1 && o.layout.ne[3] == 1;
    let ok = q.node.src(1)? == k.node.src(1)?
        && q.node.src(1)? == v.node.src(1)?
        && [&wk, &wv]
            .iter()
            .all(|w| w.dtype == wq.dtype && w.layout.ne[0] == wq.layout.ne[0])
        && unit_decoded(wq.dtype)
        && [q, k, v].iter().all(|c| c.out().dtype == DType::F32)
        && [&wq, &wk, &wv, &x].into_iter().all(plain)
        && [(q, &wq), (k, &wk), (v, &wv)]
            .iter()
            .all(|(c, w)| unit_path(c, w, &x) && windows::fits(c, w))
        && norm.is_none_or(|nm| nm.fits(q, &wq, &x));
    let nc = VEC_COLS.into_iter().find(|&c| u64::from(c) >= n);
    Ok(nc.filter(|_| ok))
}

/// The mul_mat nodes `q`, `k`, `v` (their contexts) as one mat-vec dispatch writing all three
/// results ([`qkv_cols`]); `None` when they do not qualify.
pub(super) fn mul_mat_vec_qkv(
    q: &Ctx,
    k: &Ctx,
    v: &Ctx,
    norm: Option<&VecNorm>,
) -> Result<Option<Vec<Dispatch>>> {
    qkv_dispatch(q, k, v, norm, None)
}

/// The q/k/v mat-vec dispatch, writing the three results, or with `rope` rotating q and k and
/// storing k and v into the caches; `None` when the products do not qualify ([`qkv_cols`]).
fn qkv_dispatch(
    q: &Ctx,
    k: &Ctx,
    v: &Ctx,
    norm: Option<&VecNorm>,
    rope: Option<QkvRope>,
) -> Result<Option<Vec<Dispatch>>> {
    let Some(nc) = qkv_cols(q, k, v, norm)? else {
        return Ok(None);
    };
    let (wq, x, wk, wv) = (q.src(0)?, q.src(1)?, k.src(0)?, v.src(0)?);
    let (ea, eb) = (wq.layout.ne, x.layout.ne);
    let rows = [wq.layout.ne[1], wk.layout.ne[1], wv.layout.ne[1]];
    let int8 = q8x(
        q,
        wq.dtype,
        [&wq, &wk, &wv].map(weight_bytes).iter().sum(),
        &x,
    );
    let mut out = Vec::new();
    let scratch = quant_act(q, int8, &x, norm, &mut out)?;
    let (units, m) = (ea[0] / 32, rows.iter().sum());
    let key = match &rope {
        None => vec_key(
            wq.dtype,
            nc,
            VecEpilogue::Qkv,
            (units, m, cpu_lanes(q.caps)),
            int8,
            norm.is_some(),
        ),
        Some(r) => {
            let kind = (r.p.mode == RopeMode::Neox, r.ff.is_some());
            let stored = (kind, r.idx.dtype, r.cache_k.dtype);
            qkv_rope_key(
                wq.dtype,
                nc,
                (units, m, cpu_lanes(q.caps)),
                int8,
                norm.is_some(),
                stored,
            )
        }
    };
    let rpw = vec_rpw(&key);
    let mut op = product_words(q, ea, eb, rows[0], rows[1])?;
    op[6] = q.items(rows[2])?;
    let mut operands = vec![wq, x, wk, wv];
    match rope {
        None => operands.extend([q.out(), k.out(), v.out()]),
        Some(r) => {
            op[8] = q.items(u64::from(r.p.n_dims))?;
            for (i, w) in super::nn::rope_angle_words(&r.p).into_iter().enumerate() {
                op[9 + i] = w.to_bits();
            }
            operands.push(r.pos);
            operands.extend(r.ff);
            operands.extend([r.idx, r.q_out, r.cache_k, r.cache_v]);
        }
    }
    let Kernel::MulMatVec { epilogue, .. } = key.kernel else {
        unreachable!("a mat-vec key")
    };
    if let Some(nm) = norm {
        nm.apply(epilogue, &mut operands, &mut op);
    }
    if let Some(s) = scratch {
        operands[1] = s;
    }
    let groups: u64 = rows.iter().map(|m| m.div_ceil(rpw)).sum();
    let key = bind_weights(q, key, &operands);
    out.push(Dispatch {
        key,
        operands,
        op_words: op,
        items: q.items(m * eb[1])?,
        groups: q.grid(groups, 1)?,
    });
    Ok(Some(out))
}

/// The rotation and cache stores a q/k/v mat-vec takes over ([`mul_mat_vec_qkv_rope`]).
pub(super) struct QkvRope {
    pub p: RopeParams,
    /// I32 `[n]` positions, and the optional f32 frequency factors.
    pub pos: Operand,
    pub ff: Option<Operand>,
    /// I32 or I64 `[n]` cache rows.
    pub idx: Operand,
    /// The rotated q `[head_dim, heads, n]`, and the K and V caches `[head_dim · kv heads, ctx]`.
    pub q_out: Operand,
    pub cache_k: Operand,
    pub cache_v: Operand,
}

/// The q/k/v mat-vec pipeline with rotation and cache stores: `vec_key` with the cache rows'
/// and the caches' dtypes.
fn qkv_rope_key(
    a: DType,
    nc: u32,
    dims: (u64, u64, Option<u32>),
    int8: bool,
    norm: bool,
    (rope, idx, cache): ((bool, bool), DType, DType),
) -> PipelineKey {
    let epilogue = VecEpilogue::QkvRope {
        neox: rope.0,
        freq_factors: rope.1,
    };
    let mut key = vec_key(a, nc, epilogue, dims, int8, norm);
    let s = VecSlots::new(epilogue, norm);
    key.dtypes[s.s] = idx;
    key.dtypes[s.ok] = cache;
    key.dtypes[s.d] = cache;
    key
}

/// The q/k/v products (contexts, with an optional norm prologue) and `r`, the rotation of q and
/// k and the stores of k and v into the caches that follow them, as one mat-vec dispatch: what
/// [`mul_mat_vec_qkv`] takes, q and k of one head size `hd` (reshaped `[hd, heads, n]` for the
/// ropes), normal or neox pairs over an even `n_dims <= hd`, f32 or f16 caches of one dtype,
/// rows of `hd` · k heads; `None` when they do not qualify or the device binds too few storage
/// buffers per kernel (9, one more with the norm, one more with frequency factors).
pub(super) fn mul_mat_vec_qkv_rope(
    q: &Ctx,
    k: &Ctx,
    v: &Ctx,
    norm: Option<&VecNorm>,
    r: QkvRope,
) -> Result<Option<Vec<Dispatch>>> {
    let (wq, x, wk, wv) = (q.src(0)?, q.src(1)?, k.src(0)?, v.src(0)?);
    let n = x.layout.ne[1];
    let hd = r.q_out.layout.ne[0];
    let rows = [wq.layout.ne[1], wk.layout.ne[1], wv.layout.ne[1]];
    let rot = u64::from(r.p.n_dims);
    let plain = |o: &Operand| o.layout.ne[2] == 1 && o.layout.ne[3] == 1;
    let column = |o: &Operand| o.layout.ne == [n, 1, 1, 1];
    let cache = r.cache_k.dtype;
    let bindings = 9 + usize::from(norm.is_some()) + usize::from(r.ff.is_some());
    let ok = matches!(r.p.mode, RopeMode::Normal | RopeMode::Neox)
        && rot.is_multiple_of(2)
        && rot <= hd
        && hd.is_multiple_of(2)
        && r.q_out.dtype == DType::F32
        && r.q_out.layout.is_contiguous(DType::F32)
        && r.q_out.layout.ne == [hd, rows[0] / hd, n, 1]
        && rows[0].is_multiple_of(hd)
        && rows[1].is_multiple_of(hd)
        && rows[1] == rows[2]
        && r.pos.dtype == DType::I32
        && column(&r.pos)
        && r.ff
            .as_ref()
            .is_none_or(|f| f.dtype == DType::F32 && f.layout.ne[0] >= rot / 2 && plain(f))
        && matches!(r.idx.dtype, DType::I32 | DType::I64)
        && column(&r.idx)
        && r.cache_v.dtype == cache
        && matches!(cache, DType::F32 | DType::F16)
        && (cache == DType::F32 || q.caps.shader_f16)
        && [&r.cache_k, &r.cache_v]
            .iter()
            .all(|c| plain(c) && c.layout.ne[0] == rows[1])
        && q.caps.limits.max_storage_buffers_per_shader_stage as usize >= bindings;
    if !ok {
        return Ok(None);
    }
    qkv_dispatch(q, k, v, norm, Some(r))
}

/// The mul_mat nodes `gate` and `up` (their contexts; same activation, same weight shape and
/// dtype) followed by a GLU `expr` of the two, whose result is `dst`, as one mat-vec dispatch;
/// `None` when they do not qualify.
pub(super) fn mul_mat_vec_glu(
    gate: &Ctx,
    up: &Ctx,
    expr: &'static str,
    dst: Operand,
    norm: Option<&VecNorm>,
) -> Result<Option<Vec<Dispatch>>> {
    let (wg, x, wu) = (gate.src(0)?, gate.src(1)?, up.src(0)?);
    let n = x.layout.ne[1];
    let same = gate.node.src(1)? == up.node.src(1)?
        && wg.dtype == wu.dtype
        && wg.layout.ne == wu.layout.ne
        && gate.out().layout.ne == dst.layout.ne;
    let ok = same
        && unit_decoded(wg.dtype)
        && dst.dtype == DType::F32
        && unit_path(gate, &wg, &x)
        && unit_path(up, &wu, &x)
        && windows::fits(gate, &wg)
        && windows::fits(up, &wu)
        && norm.is_none_or(|nm| nm.fits(gate, &wg, &x));
    let Some(nc) = VEC_COLS.into_iter().find(|&c| u64::from(c) >= n) else {
        return Ok(None);
    };
    if !ok {
        return Ok(None);
    }
    let (ea, eb) = (wg.layout.ne, x.layout.ne);
    let m = ea[1];
    let mut op = product_words(gate, ea, eb, m, 0)?;
    let epilogue = VecEpilogue::Glu { expr };
    let int8 = q8x(gate, wg.dtype, 2 * weight_bytes(&wg), &x);
    let mut out = Vec::new();
    let scratch = quant_act(gate, int8, &x, norm, &mut out)?;
    let dims = (ea[0] / 32, m, cpu_lanes(gate.caps));
    let key = vec_key(wg.dtype, nc, epilogue, dims, int8, norm.is_some());
    let rpw = vec_rpw(&key);
    let mut operands = vec![wg, x, wu, dst];
    if let Some(nm) = norm {
        nm.apply(epilogue, &mut operands, &mut op);
    }
    if let Some(s) = scratch {
        operands[1] = s;
    }
    let key = bind_weights(gate, key, &operands);
    out.push(Dispatch {
        key,
        operands,
        op_words: op,
        items: gate.items(m * eb[1] * eb[2] * eb[3])?,
        groups: gate.grid(m.div_ceil(rpw), eb[2] * eb[3])?,
    });
    Ok(Some(out))
}

/// The mul_mat node `mm` (its context) followed by ggml_add of `residual` (same extents, f32),
/// whose result is `dst`, as one mat-vec dispatch per weight window; `None` when the product
/// does not take the mat-vec path. With `pre`, its activations were already rounded to int8 by
/// an earlier dispatch ([`q8x_scratch`] of them without sums of h²: the attention output,
/// `attention::flash_attn_ext_q8x`), and it is `None` too when the product does not take int8
/// activations ([`q8x`]'s policy even though the rounding is free here: small weights gain
/// no more than noise from int8, and the policy keeps the op table's small products exact;
/// bench/results/HISTORY.md, "pre-rounded attention output").
pub(super) fn mul_mat_vec_add(
    mm: &Ctx,
    residual: Operand,
    dst: Operand,
    pre: Option<Operand>,
) -> Result<Option<Vec<Dispatch>>> {
    let (a, b) = (mm.src(0)?, mm.src(1)?);
    let int8_ok = || q8x(mm, a.dtype, weight_bytes(&a), &b) && b.layout.ne[0].is_multiple_of(32);
    if pre.is_some() && !int8_ok() {
        return Ok(None);
    }
    let n = b.layout.ne[1];
    let ok = mm.out().layout.ne == dst.layout.ne
        && residual.layout.ne == dst.layout.ne
        && residual.dtype == DType::F32
        && dst.dtype == DType::F32
        && b.dtype == DType::F32
        && unit_path(mm, &a, &b)
        && (unit_decoded(a.dtype) || n == 1);
    let act = match pre {
        Some(pre) => Act::Q8X(pre),
        None => Act::F32(None),
    };
    match VEC_COLS.into_iter().find(|&c| u64::from(c) >= n) {
        Some(nc) if ok => mul_mat_vec(mm, &a, &b, &dst, Some(&residual), nc, act).map(Some),
        _ => Ok(None),
    }
}

/// The mul_mat node `mm` (its context) of activations `rms_norm(h) · g` as one mat-vec
/// dispatch per weight window with the norm fused in; `None` when they do not qualify.
pub(super) fn mul_mat_vec_norm(mm: &Ctx, norm: &VecNorm) -> Result<Option<Vec<Dispatch>>> {
    let (a, b, dst) = (mm.src(0)?, mm.src(1)?, mm.out());
    let n = b.layout.ne[1];
    let ok = dst.dtype == DType::F32
        && b.dtype == DType::F32
        && unit_path(mm, &a, &b)
        && unit_decoded(a.dtype)
        && norm.fits(mm, &a, &b);
    match VEC_COLS.into_iter().find(|&c| u64::from(c) >= n) {
        Some(nc) if ok => mul_mat_vec(mm, &a, &b, &dst, None, nc, Act::F32(Some(norm))).map(Some),
        _ => Ok(None),
    }
}

/// A mat-vec's activations: f32 (with a norm in front of the product or not; rounded to int8
/// by a dispatch of its own where the int8 policy says), or already rounded to int8 into a
/// [`q8x_scratch`].
enum Act<'a> {
    F32(Option<&'a VecNorm>),
    Q8X(Operand),
}

/// mul_mat of more than 8 columns on a CPU adapter ([`crate::KernelShapes`]): the mat-vec, 8
/// columns a dispatch, each reading its columns of `b` and writing those of `dst` in place.
/// There a workgroup costs per lane, and `mul_mat_tiled.wgsl`'s 256 lanes with two barriers a
/// step cost most: SmolLM2-135M's 16-token prefill took 4.5 s of products on Chromium's
/// SwiftShader (2 cores) against 29.7 s tiled.
fn mul_mat_vec_chunks(ctx: &Ctx, a: &Operand, b: &Operand, dst: &Operand) -> Result<Vec<Dispatch>> {
    let n = b.layout.ne[1];
    let mut out = Vec::new();
    for j in (0..n).step_by(8) {
        let cols = (n - j).min(8);
        let (mut bj, mut dj) = (b.clone(), dst.clone());
        for o in [&mut bj, &mut dj] {
            o.layout.offset += j * o.layout.nb[1];
            o.layout.ne[1] = cols;
        }
        // 1, 2, 4 or 8: the `VEC_COLS` that holds `cols`.
        let nc = (cols as u32).next_power_of_two();
        out.extend(mul_mat_vec(ctx, a, &bj, &dj, None, nc, Act::F32(None))?);
    }
    Ok(out)
}

/// mul_mat through `mul_mat_vec.wgsl` (shape from `vec_shape`), plus
/// `residual` when given.
fn mul_mat_vec(
    ctx: &Ctx,
    a: &Operand,
    b: &Operand,
    dst: &Operand,
    residual: Option<&Operand>,
    nc: u32,
    act: Act,
) -> Result<Vec<Dispatch>> {
    let (ea, eb) = (a.layout.ne, b.layout.ne);
    let epilogue = match residual {
        Some(_) => VecEpilogue::Add,
        None => VecEpilogue::None,
    };
    let mut out = Vec::new();
    let (int8, norm, scratch) = match act {
        Act::F32(norm) => {
            let int8 = q8x(ctx, a.dtype, weight_bytes(a), b);
            (int8, norm, quant_act(ctx, int8, b, norm, &mut out)?)
        }
        Act::Q8X(pre) => (true, None, Some(pre)),
    };
    for w in windows::row_windows(ctx, a)? {
        let m = w.operand.layout.ne[1];
        let dims = (ea[0] / 32, m, cpu_lanes(ctx.caps));
        let key = vec_key(a.dtype, nc, epilogue, dims, int8, norm.is_some());
        let rpw = vec_rpw(&key);
        let mut d = dst.clone();
        d.layout.ne[0] = m;
        d.layout.offset += w.first_row * d.layout.nb[0];
        let mut op = product_words(ctx, ea, eb, m, 0)?;
        let mut operands = vec![w.operand, b.clone()];
        if let Some(r) = residual {
            let mut r = r.clone();
            r.layout.ne[0] = m;
            r.layout.offset += w.first_row * r.layout.nb[0];
            operands.push(r);
        }
        operands.push(d);
        if let Some(nm) = norm {
            nm.apply(epilogue, &mut operands, &mut op);
        }
        if let Some(s) = &scratch {
            operands[1] = s.clone();
        }
        let key = bind_weights(ctx, key, &operands);
        out.push(Dispatch {
            key,
            operands,
            op_words: op,
            items: ctx.items(m * eb[1] * eb[2] * eb[3])?,
            groups: ctx.grid(m.div_ceil(rpw), eb[2] * eb[3])?,
        });
    }
    Ok(out)
}

/// The bindings of a tiled or coop product of weights `a`: with `id` (mul_mat_id's routed
/// columns) the routes of `moe_route.wgsl` between the activations and the result.
fn tile_dtypes(a: DType, id: bool) -> Vec<DType> {
    match id {
        true => vec![a, DType::F32, DType::I32, DType::F32],
        false => vec![a, DType::F32, DType::F32],
    }
}

fn tiled_key(a: DType, bm: u32, id: bool) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MulMatTiled { bm, id },
        dtypes: tile_dtypes(a, id),
        wg: 256,
    }
}

/// Output tiles of 128 × 64 from which `mul_mat_tiled.wgsl` takes 128-row tiles (8 × 4 sums an
/// invocation instead of 4 × 4: fewer workgroup-memory reads a multiply-add); a product with
/// fewer keeps 64-row tiles, twice as many workgroups, since filling the device then matters
/// more than the reads (bench/results/HISTORY.md, "tiled kernel tile rows").
const TILED_WIDE_TILES: u64 = 128;

/// The weight rows (64 or 128) of `mul_mat_tiled.wgsl`'s tiles for a product of `m` rows, `n`
/// columns and `batches`: 128 for [`TILED_WIDE_TILES`] tiles or more where the device has the
/// workgroup memory (24 KiB; 64-row tiles take WebGPU's default 16 KiB).
fn tiled_bm(ctx: &Ctx, [m, n, batches]: [u64; 3]) -> u32 {
    // A step of the tile's rows and columns: 8 vec4s of f32 each.
    let fits = (128 + 64) * 8 * 16 <= ctx.caps.limits.max_compute_workgroup_storage_size;
    match fits && m.div_ceil(128) * n.div_ceil(64) * batches >= TILED_WIDE_TILES {
        true => 128,
        false => 64,
    }
}

/// Fewest activation columns `mul_mat_coop.wgsl` takes (fewer go to the tiled kernel).
pub(crate) const COOP_MIN_N: u64 = 16;
/// Weight rows of a `mul_mat_coop.wgsl` tile (its invocations). 256-row tiles (8 subgroups)
/// fill a compute unit's registers alone, so its barriers stall it; two 128-row workgroups
/// share one and overlap (bench/results/HISTORY.md, "coop tile rows").
const COOP_BM: u32 = 128;
/// Output tiles of `COOP_BM` × 128 a product needs for the 128-column coop tiles: with fewer,
/// `COOP_BM` × 64 tiles keep twice as many workgroups (a 4096-row, 512-column product has
/// 128, and runs faster in 128-column tiles: bench/results/HISTORY.md, "coop tile columns").
const COOP_WIDE_TILES: u64 = 128;
/// Column tiles up to which `mul_mat_coop.wgsl` takes its tiles along n first (op word 6):
/// the workgroups running at once then share each weight tile, which is read from memory
/// about once instead of once per column tile, while so few columns' activations stay in
/// cache. A 512-token prefill has 4 or 8 column tiles.
const COOP_N_FIRST: u64 = 8;

/// Workgroups a coop product should have for the device to be full: about two per compute
/// unit of a large GPU (two 128-row workgroups share one). Products with fewer output tiles
/// are split along k ([`coop_splits`]).
const COOP_FILL: u64 = 256;
/// The most splits along k, and the fewest 32-deep steps a split takes.
const COOP_MAX_SPLITS: u64 = 4;
const COOP_SPLIT_STEPS: u64 = 32;

/// Splits along k for a coop product of `tiles` output tiles (a single batch) and `k` weights
/// a row: doubled while the workgroups stay within [`COOP_FILL`] and each split keeps at
/// least [`COOP_SPLIT_STEPS`] steps of 32, up to [`COOP_MAX_SPLITS`]. Each split's f32 sum
/// goes to scratch, and `mul_mat_split.wgsl` adds them into the result. Splitting pays where a
/// product has about one workgroup per compute unit or fewer (a 512-token prefill's 4096-wide
/// projections), each waiting on its loads alone; filling more workgroups or taking shorter
/// splits does not pay (bench/results/HISTORY.md, "coop split-k").
fn coop_splits(tiles: u64, batches: u64, k: u64) -> u64 {
    let steps = k / 32;
    let mut s = 1;
    while batches == 1
        && s < COOP_MAX_SPLITS
        && tiles * s * 2 <= COOP_FILL
        && steps.is_multiple_of(s * 2)
        && steps / (s * 2) >= COOP_SPLIT_STEPS
    {
        s *= 2;
    }
    s
}

fn split_key() -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MulMatSplit,
        dtypes: vec![DType::F32, DType::F32],
        wg: super::WG_ELEMENTWISE,
    }
}

fn coop_key(a: DType, bm: u32, bn: u32, id: bool) -> PipelineKey {
    coop_add_key(a, bm, bn, id, &CoopEpilogue::default())
}

/// [`coop_key`] of a product with the epilogue `epi`.
fn coop_add_key(a: DType, bm: u32, bn: u32, id: bool, epi: &CoopEpilogue) -> PipelineKey {
    let (bias, res) = (epi.bias.is_some(), epi.residual.is_some());
    let mut dtypes = tile_dtypes(a, id);
    let at = dtypes.len() - 1;
    dtypes.splice(at..at, epi.operands().map(|o| o.dtype));
    PipelineKey {
        kernel: Kernel::MulMatCoop {
            bn,
            id,
            bias,
            res,
            act: epi.act,
        },
        dtypes,
        wg: bm,
    }
}

/// The nodes that read a coop product, fused into it: what its sums start from (`bias`, one
/// f32 value per result row, as a linear layer's `[m, 1, 1, 1]`; `residual`, an f32 tensor of
/// the result's extents) and the activation (`act`, an f32 expression of `x`) stored in place
/// of each sum.
#[derive(Clone, Default)]
pub(super) struct CoopEpilogue {
    pub bias: Option<Operand>,
    pub residual: Option<Operand>,
    pub act: Option<&'static str>,
}

impl CoopEpilogue {
    fn is_empty(&self) -> bool {
        self.bias.is_none() && self.residual.is_none() && self.act.is_none()
    }

    fn operands(&self) -> impl Iterator<Item = &Operand> {
        self.bias.iter().chain(&self.residual)
    }

    /// The addends of the result rows `first .. first + m` (a weight's row window).
    fn window(&self, first: u64, m: u64) -> CoopEpilogue {
        let cut = |o: &Operand| {
            let mut o = o.clone();
            o.layout.offset += first * o.layout.nb[0];
            o.layout.ne[0] = m;
            o
        };
        CoopEpilogue {
            bias: self.bias.as_ref().map(cut),
            residual: self.residual.as_ref().map(cut),
            act: self.act,
        }
    }
}

/// The mul_mat node `mm` (its context) with the epilogue `add`, as the coop products'
/// dispatches writing `dst`; `None` where the product does not take `mul_mat_coop.wgsl` (the
/// fused nodes then run as their own passes). Every linear layer of an encoder adds a bias, its
/// FFN's first one an activation, and pre-norm blocks add their residual to two products.
pub(super) fn mul_mat_coop_epilogue(
    mm: &Ctx,
    add: &CoopEpilogue,
    dst: Operand,
) -> Result<Option<Vec<Dispatch>>> {
    let (a, b) = (mm.src(0)?, mm.src(1)?);
    let (ea, eb, ed) = (a.layout.ne, b.layout.ne, dst.layout.ne);
    let f32_row = |o: &Operand| o.dtype == DType::F32 && o.layout.ne == [ed[0], 1, 1, 1];
    let ok = mm.out().layout.ne == ed
        && dst.dtype == DType::F32
        && b.dtype == DType::F32
        && add.bias.as_ref().is_none_or(f32_row)
        && (add.residual.as_ref()).is_none_or(|r| r.dtype == DType::F32 && r.layout.ne == ed)
        && unit_path(mm, &a, &b)
        && eb[1] > u64::from(VEC_COLS[VEC_COLS.len() - 1])
        && !mm.caps.cpu_shapes
        && windows::column_windows(mm, &b, &dst)?.len() == 1
        && coop_tile(mm, &a, &dst, [ea[0], ea[1], eb[1], eb[2] * eb[3]]).is_some();
    if !ok || add.is_empty() {
        return Ok(None);
    }
    mul_mat_tiled(mm, &a, &b, &dst, add).map(Some)
}

/// Workgroup memory of `mul_mat_coop.wgsl` with `bm` × `bn` tiles: one f16 step of `bm`
/// weight rows and `bn` activation columns (rows of 40 halves), and one 16 × 16 f32
/// accumulator per subgroup for edge tiles.
fn coop_storage(bm: u32, bn: u32) -> u32 {
    (bm + bn) * 40 * 2 + bm / 32 * 256 * 4
}

/// Whether the coop kernels (`mul_mat_coop.wgsl`, `flash_attn_coop.wgsl`) run on a device:
/// cooperative matrices enabled with 16 × 16 × 16 f16 × f16 + f32 among their configurations,
/// f16, and subgroups of exactly 32.
pub(crate) fn coop_f16(c: &Capabilities) -> bool {
    let f16_16 = c.cooperative_matrix_configs.iter().any(|p| {
        use wgpu::CooperativeScalarType as S;
        (p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type) == (16, 16, 16, S::F16, S::F32)
    });
    c.cooperative_matrix
        && f16_16
        && c.shader_f16
        && c.subgroups
        && (c.subgroup_min_size, c.subgroup_max_size) == (32, 32)
}

/// Whether `mul_mat_coop.wgsl` reads the weights `a`: it binds f16 weights as vec4<f16> (a
/// part's 8 values are two 8-byte loads, stored to workgroup memory as they are), so their rows
/// must start on 8-byte boundaries, within their bindings too; other formats are read as words.
/// f16 weights that are not take the tiled kernel.
fn coop_reads(ctx: &Ctx, a: &Operand) -> bool {
    a.dtype != DType::F16 || super::rows_on(ctx, &a.layout, 8)
}

/// The tile (rows, columns) `mul_mat_coop.wgsl` runs a product of weights `a` (`m` rows of `k`),
/// `n` columns and `batches` into `dst` with, or `None` for the tiled kernel: [`coop_f16`],
/// [`coop_reads`], the workgroup memory, the rows are not empty and dst's rows are contiguous.
fn coop_tile(
    ctx: &Ctx,
    a: &Operand,
    dst: &Operand,
    [k, m, n, batches]: [u64; 4],
) -> Option<(u32, u32)> {
    let c = ctx.caps;
    let ok = coop_f16(c) && coop_reads(ctx, a) && k > 0 && n >= COOP_MIN_N && dst.layout.nb[0] == 4;
    let bm = COOP_BM;
    let wide = m.div_ceil(u64::from(bm)) * n.div_ceil(128) * batches >= COOP_WIDE_TILES;
    let fits = |bn: u32| coop_storage(bm, bn) <= c.limits.max_compute_workgroup_storage_size;
    match (ok, wide) {
        (false, _) => None,
        (true, true) if fits(128) => Some((bm, 128)),
        (true, _) => Some((bm, 64)).filter(|&(_, bn)| fits(bn)),
    }
}

/// The kernel mul_mat_id's routed columns run on (`moe::mul_mat_id_tiled`) and its tile
/// (rows, columns): `mul_mat_coop.wgsl`'s 128 × 64 where [`coop_f16`], [`coop_reads`] and the
/// workgroup memory allow (a 512-token prefill of Qwen3-30B-A3B routes 32 columns to each of
/// 128 experts on average), else `mul_mat_tiled.wgsl`'s 64 × 64.
pub(super) fn id_tile(ctx: &Ctx, a: &Operand) -> (PipelineKey, u64, u64) {
    let c = ctx.caps;
    // The routed coop kernel holds one more word: its bucket's column count.
    let fits = coop_storage(COOP_BM, 64) + 4 <= c.limits.max_compute_workgroup_storage_size;
    match coop_f16(c) && coop_reads(ctx, a) && fits {
        true => (coop_key(a.dtype, COOP_BM, 64, true), u64::from(COOP_BM), 64),
        false => (tiled_key(a.dtype, 64, true), 64, 64),
    }
}

/// mul_mat through `mul_mat_tiled.wgsl` (one workgroup per [`tiled_bm`] × 64 tile of the
/// result), or `mul_mat_coop.wgsl` (128 × 64 or 128 × 128, split along k by [`coop_splits`])
/// where [`coop_tile`] allows.
/// With `add` (coop tiles only) the sums start from those addends.
fn mul_mat_tiled(
    ctx: &Ctx,
    a: &Operand,
    b: &Operand,
    dst: &Operand,
    add: &CoopEpilogue,
) -> Result<Vec<Dispatch>> {
    let (ea, eb) = (a.layout.ne, b.layout.ne);
    let (key, bm, bn) = match coop_tile(ctx, a, dst, [ea[0], ea[1], eb[1], eb[2] * eb[3]]) {
        Some((bm, bn)) => (
            coop_add_key(a.dtype, bm, bn, false, add),
            u64::from(bm),
            u64::from(bn),
        ),
        None if !add.is_empty() => {
            return Err(ctx.unsupported("addends on a product that is not cooperative"))
        }
        None => {
            let bm = tiled_bm(ctx, [ea[1], eb[1], eb[2] * eb[3]]);
            (tiled_key(a.dtype, bm, false), u64::from(bm), 64)
        }
    };
    let coop = matches!(key.kernel, Kernel::MulMatCoop { .. });
    let batches = eb[2] * eb[3];
    let mut out = Vec::new();
    for w in windows::row_windows(ctx, a)? {
        let m = w.operand.layout.ne[1];
        let mut d = dst.clone();
        d.layout.ne[0] = m;
        d.layout.offset += w.first_row * d.layout.nb[0];
        let (tiles_m, tiles_n) = (m.div_ceil(bm), eb[1].div_ceil(bn));
        let mut op = product_words(ctx, ea, eb, m, tiles_m)?;
        if coop && tiles_n <= COOP_N_FIRST {
            op[6] = ctx.items(tiles_n)?;
        }
        // The activation is of the whole sum: no split.
        let splits = match coop && add.act.is_none() {
            true => coop_splits(tiles_m * tiles_n, batches, ea[0]),
            false => 1,
        };
        // Split: the product's slices into scratch, then their sum into d.
        let part = match splits {
            1 => None,
            _ => {
                let mut part = Operand::scratch(DType::F32, m * eb[1] * splits)?;
                part.layout = Layout::contiguous(DType::F32, [m, eb[1], splits, 1])?;
                op[7] = ctx.items(splits)?;
                Some(part)
            }
        };
        let mut operands = vec![w.operand, b.clone()];
        operands.extend(add.window(w.first_row, m).operands().cloned());
        operands.push(part.clone().unwrap_or(d.clone()));
        out.push(Dispatch {
            key: key.clone(),
            operands,
            op_words: op,
            items: ctx.items(m * eb[1] * batches)?,
            groups: ctx.grid(tiles_m * tiles_n, batches * splits)?,
        });
        if let Some(part) = part {
            let mut op = [0; OP_WORDS];
            op[..3].copy_from_slice(&[ctx.items(m)?, ctx.items(eb[1])?, ctx.items(splits)?]);
            out.push(ctx.per_item(split_key(), vec![part, d], op, m * eb[1])?);
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys: Vec<PipelineKey> = [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
        .map(|a| key(a, DType::F32))
        .collect();
    keys.push(key(DType::F16, DType::F16));
    for a in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
    {
        // With `cpu` the CPU adapters' shapes: fewer lanes than sums.
        for (units, m, int8, cpu) in [
            (2, 5, true, None),
            (64, 4096, true, None),
            (100, 4096, false, None),
            (1000, 14336, false, None),
            (1000, 14336, true, None),
            (18, 576, false, Some(4)),
            (64, 4096, true, Some(8)),
        ] {
            // Int8 activations for integer decoders.
            let f = int8 && int8_activations(a);
            let mut add = |e, norm| {
                keys.extend(VEC_COLS.map(|nc| vec_key(a, nc, e, (units, m, cpu), f, norm)));
            };
            add(VecEpilogue::None, false);
            add(VecEpilogue::Add, false);
            if unit_decoded(a) {
                let glu = VecEpilogue::Glu {
                    expr: super::nn::glu_expr(wgllm_core::op::GluOp::Swiglu).0,
                };
                for norm in [false, true] {
                    add(glu, norm);
                    add(VecEpilogue::Qkv, norm);
                }
                add(VecEpilogue::None, true);
                let id_glu = VecEpilogue::IdGlu {
                    expr: super::nn::glu_expr(wgllm_core::op::GluOp::Swiglu).0,
                };
                for id_int8 in [false, f] {
                    for e in [VecEpilogue::Id, id_glu] {
                        keys.push(vec_key(a, 1, e, (units, m, cpu), id_int8, false));
                    }
                }
                for norm in [false, true] {
                    for rope in [
                        ((false, false), DType::I64, DType::F16),
                        ((true, true), DType::I32, DType::F32),
                    ] {
                        keys.extend(
                            VEC_COLS.map(|nc| qkv_rope_key(a, nc, (units, m, cpu), f, norm, rope)),
                        );
                    }
                }
            }
        }
        keys.push(tiled_key(a, 128, false));
        for id in [false, true] {
            keys.push(tiled_key(a, 64, id));
            keys.push(coop_key(a, COOP_BM, 64, id));
        }
        keys.push(coop_key(a, COOP_BM, 128, false));
        let f32s = |n| Operand::scratch(DType::F32, n).ok();
        let gelu = Some("gelu(x)");
        for (bias, residual, act) in [
            (f32s(1), None, None),
            (None, f32s(1), None),
            (f32s(1), f32s(1), None),
            (f32s(1), None, gelu),
            (None, None, gelu),
        ] {
            let add = CoopEpilogue {
                bias,
                residual,
                act,
            };
            for bn in [64, 128] {
                keys.push(coop_add_key(a, COOP_BM, bn, false, &add));
            }
        }
    }
    keys.push(split_key());
    // Each mat-vec variant with its weights read-only too, and q4_K's int8 ones as vec4s.
    let read_only: Vec<PipelineKey> = keys
        .iter()
        .filter_map(|k| match k.kernel {
            Kernel::MulMatVec { q8x, .. } => {
                let mut k = k.clone();
                let vec4 = q8x && matches!(k.dtypes[0], DType::Q4_K | DType::Q5_K);
                if let Kernel::MulMatVec { ro_weights, .. } = &mut k.kernel {
                    *ro_weights = true;
                }
                let mut wide = k.clone();
                if let Kernel::MulMatVec { wv4, .. } = &mut wide.kernel {
                    *wv4 = true;
                }
                Some(if vec4 { vec![k, wide] } else { vec![k] })
            }
            _ => None,
        })
        .flatten()
        .collect();
    keys.extend(read_only);
    for norm in [false, true] {
        let f = DType::F32;
        let dtypes = match norm {
            false => vec![f, DType::I32],
            true => vec![f, f, DType::I32],
        };
        let kernel = Kernel::QuantAct { norm };
        keys.push(PipelineKey {
            kernel,
            dtypes,
            wg: QUANT_ACT_WG,
        });
    }
    keys
}

#[cfg(test)]
pub(crate) mod tests;
mod vec_id;
mod vec_shape;

pub(super) use vec_id::mul_mat_vec_id;
use vec_shape::{cpu_lanes, vec_shape};
