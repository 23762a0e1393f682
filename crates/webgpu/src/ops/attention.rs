//! Fused attention: ggml_flash_attn_ext. Few query rows (decode) run `flash_attn_vec.wgsl`, the
//! query heads of one K/V head together and the keys cut into splits merged by
//! `flash_attn_combine.wgsl`; many rows (prefill) run `flash_attn_coop.wgsl` where cooperative
//! matrices do (f16 K/V, heads of 128), else `flash_attn_tile.wgsl`, blocks of rows sharing
//! each tile of K and V; what neither takes (head sizes not a multiple of 4, or too large for
//! the tile's workgroup memory) runs `flash_attn.wgsl`, a workgroup a row. K/V readers in
//! `flash_attn_kv.wgsl`.

use wgllm_core::{DType, Result};

use super::{words, Ctx, Dispatch, Operand};
use crate::kernels::{Kernel, PipelineKey, COMBINE_COLS, COMBINE_MAX_SPLITS, OP_WORDS};

/// Invocations per workgroup, and keys per tile, of `flash_attn.wgsl`.
const WG_ATTN: u32 = 64;
/// Invocations per workgroup of `flash_attn_vec.wgsl` over split walks (16 octets).
const WG_VEC: u32 = 128;
/// Keys an octet of the vec kernel takes a step (KB in the kernel) over split walks with
/// subgroups, but where [`split_keys`] takes 2 (1 without subgroups:
/// [`VEC_SUMS_WITHOUT_SUBGROUPS`]). Such walks are cut into splits of their own steps (64 or
/// 32 keys).
const VEC_KEYS: u32 = 4;
/// Keys the other vec walks are cut in: four 16-key steps of the split walks without
/// subgroups (and the unit the unsplit ones count their keys in).
const VEC_STEP: u64 = 64;
/// Caches past this many keys take 2 keys an octet over split walks ([`split_keys`]).
const VEC_LONG_KV: u64 = 4096;

/// Keys an octet takes a step over split walks with subgroups, for K heads of `d` values over
/// `n_kv` keys: 2 for heads of at most 64 values or past [`VEC_LONG_KV`] keys, else
/// [`VEC_KEYS`]. Fewer keys a step hold fewer K/V loads a lane; the walk takes twice the steps
/// and its splits are cut in its 32-key steps. Larger heads over shorter caches run faster
/// with 4, and more splits of 4-key walks do not stand in for 2 (bench/results/HISTORY.md,
/// "vec split-walk keys").
fn split_keys(d: u64, n_kv: u64) -> u32 {
    match d <= 64 || n_kv > VEC_LONG_KV {
        true => 2,
        false => VEC_KEYS,
    }
}
/// Shapes of the vec kernel over unsplit caches (at most [`VEC_UNSPLIT_KV`] keys), best first:
/// (invocations, keys an octet takes a step). The planner takes the first whose invocations
/// and workgroup memory ([`vec_storage`]) the device has. Early in a generation one step
/// covers every visible key, and the step is shorter with fewer keys a lane: with few
/// workgroups, more lanes each waiting on fewer K/V rows win (split walks keep [`WG_VEC`]
/// lanes and [`split_keys`]; bench/results/HISTORY.md, "vec unsplit shapes").
const VEC_UNSPLIT_SHAPES: [(u32, u32); 3] = [(512, 1), (256, 2), (WG_VEC, VEC_KEYS)];
/// Invocations per workgroup of `flash_attn_combine.wgsl`.
const WG_COMBINE: u32 = 256;
/// Query rows up to which the vec kernel runs on a GPU (a CPU adapter runs it at any count).
const VEC_MAX_Q: u64 = 8;
/// Most q·k sums (query heads × keys an octet takes) a step of `flash_attn_vec.wgsl` exchanges
/// without subgroups: its split walks then take 1 key an octet and at most 4 heads. Chromium's
/// SwiftShader (the browser tests' WebGPU, and a browser's without a GPU) builds and runs more
/// sums a step far slower, or loses the device. The unsplit shapes take one head, so at most 4
/// too (bench/results/HISTORY.md, "vec sums without subgroups").
const VEC_SUMS_WITHOUT_SUBGROUPS: u64 = 4;

/// Workgroup memory of `flash_attn_vec.wgsl` with the shape of `o` (its variables' sizes, each
/// rounded up to 16 bytes as WebGPU counts them): q, the octets' outputs, m and l; with a mask
/// the staged terms and the visible range; without subgroups the octets' partial sums.
fn vec_storage(o: &VecOpts, (d, dv): (u64, u64), mask: bool) -> u64 {
    let (lanes, heads) = (o.lanes, u64::from(o.heads));
    let octets = u64::from(lanes / 8);
    let r16 = |bytes: u64| bytes.next_multiple_of(16);
    let staged = u64::from(crate::kernels::vec_mask_terms(o.mask_heads) * lanes);
    let masks = if mask { r16(4 * staged) + 32 } else { 0 };
    let sums = match o.subgroups {
        true => 0,
        false => r16(4 * u64::from(crate::kernels::vec_octet_sums(lanes, o.heads, o.keys))),
    };
    16 * (heads * d).div_ceil(4) + r16(4 * octets * dv) + 2 * r16(4 * octets * heads) + masks + sums
}

/// Largest head size of the vec kernel, and most output values (heads · dv) a workgroup keeps
/// (each lane holds heads · dv / 64 of them in registers, beside a step's 16 K/V loads: 8
/// heads of 128 would be 128 accumulators a lane, past what registers hold without spilling).
const VEC_MAX_HEAD: u64 = 256;
const VEC_MAX_OUT: u64 = 512;
/// Over caches of at most this many keys (past [`VEC_UNSPLIT_KV`], which take one head a
/// workgroup) a vec workgroup keeps half as many output values: with fewer registers held,
/// the short walks' fixed costs shrink, while longer walks gain more from more heads sharing
/// each K/V read (bench/results/HISTORY.md, "vec heads over short caches").
const VEC_SHORT_KV: u64 = 2048;
/// Most query heads a vec workgroup takes.
const VEC_MAX_HEADS: u64 = 8;
/// Steps of a split walk (of [`VEC_STEP`] keys without subgroups) a vec split takes at least,
/// so its fixed costs (loading q, merging octets, writing its partial result) stay small
/// beside its K/V reads.
const VEC_MIN_STEPS: u64 = 2;
/// Caches of at most this many keys run the vec kernel unsplit: one workgroup per head group
/// walks the visible keys, and the combine dispatch and its scratch round trip go. A model
/// passes its whole cache, so early in a generation most keys are masked and a split would
/// mostly find none; the limit stays short because a cache full up to it is one workgroup's
/// walk. A workgroup then takes one query head, so more workgroups walk the keys side by side
/// (bench/results/HISTORY.md, "vec unsplit caches").
const VEC_UNSPLIT_KV: u64 = 1024;
/// Workgroups a split attention aims for: enough to fill a large GPU several times over.
const SPLIT_TARGET_GROUPS: u64 = 1024;
/// The vec kernel's shape on a CPU adapter ([`crate::KernelShapes`]), at any cache length and
/// row count: one octet of one key a step, and the workgroups a split attention aims for
/// there. A CPU adapter runs a workgroup's barriers as coroutine switches, so the kernel's
/// fewest lanes, one octet, cost least (bench/results/HISTORY.md, "vec shape on CPU adapters").
const CPU_VEC_SHAPE: (u32, u32) = (8, 1);
const CPU_SPLIT_TARGET_GROUPS: u64 = 64;
/// Query rows per workgroup of `flash_attn_tile.wgsl`, most first: the planner takes the first
/// whose workgroup memory fits the device ([`tile_storage`]).
const TILE_BQ: [u32; 3] = [32, 16, 8];
/// Largest K/V head size: q sits in workgroup memory (4 KiB at 1024) and each invocation keeps
/// `dv / 64` accumulators.
const MAX_HEAD: u64 = 1024;
/// K/V dtypes the kernels read.
const KV: [DType; 5] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
];

fn flash_attn_key(
    k: DType,
    v: DType,
    mask: Option<DType>,
    sinks: bool,
    d: u32,
    dv: u32,
    split: bool,
) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttn {
            mask: mask.is_some(),
            sinks,
            d,
            dv,
            split,
        },
        dtypes: attn_dtypes(k, v, mask),
        wg: WG_ATTN,
    }
}

fn attn_dtypes(k: DType, v: DType, mask: Option<DType>) -> Vec<DType> {
    vec![
        DType::F32,
        k,
        v,
        mask.unwrap_or(DType::F32),
        DType::F32,
        DType::F32,
    ]
}

/// The vec kernel's switches besides its dtypes and head sizes.
#[derive(Clone, Copy)]
struct VecOpts {
    /// Query heads per workgroup.
    heads: u32,
    /// Invocations per workgroup.
    lanes: u32,
    /// Keys an octet takes a step.
    keys: u32,
    split: bool,
    /// The mask terms differ per head (several mask heads, or ALiBi).
    mask_heads: bool,
    softcap: bool,
    /// The result rounded to int8 for a Q8X mat-vec (i32 words).
    q8x: bool,
    /// Octet sums through subgroup shuffles, else through workgroup memory.
    subgroups: bool,
}

/// The vec kernel's variant.
fn vec_key(
    k: DType,
    v: DType,
    mask: Option<DType>,
    sinks: bool,
    (d, dv): (u32, u32),
    o: VecOpts,
) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttnVec {
            mask: mask.is_some(),
            mask_heads: mask.is_some() && o.mask_heads,
            softcap: o.softcap,
            sinks: sinks && !o.split,
            d,
            dv,
            heads: o.heads,
            keys: o.keys,
            split: o.split,
            q8x: o.q8x,
            subgroups: o.subgroups,
        },
        dtypes: {
            let mut d = attn_dtypes(k, v, mask);
            if o.q8x {
                d[5] = DType::I32;
            }
            d
        },
        wg: o.lanes,
    }
}

fn tile_key(
    k: DType,
    v: DType,
    mask: Option<DType>,
    sinks: bool,
    (d, dv): (u32, u32),
    bq: u32,
) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttnTile {
            mask: mask.is_some(),
            sinks,
            d,
            dv,
        },
        dtypes: attn_dtypes(k, v, mask),
        wg: 4 * bq,
    }
}

/// Workgroup memory of `flash_attn_tile.wgsl` with `bq` rows a block (its header's formula),
/// as WebGPU counts it: each variable rounded up to 16 bytes, so the key range's two atomics
/// and its vec2 take 48.
fn tile_storage(bq: u64, d: u64, dv: u64) -> u64 {
    const BK: u64 = 16;
    16 * (bq + BK) * (d / 4 + 1) + 4 * BK * dv + 9 * bq * BK + 48
}

/// The rows a block of `flash_attn_tile.wgsl` takes for `n_q` query rows of heads `d`, `dv`,
/// or `None` where it does not run: decode-sized row counts (the vec kernel's), head sizes
/// not a multiple of 4, or no block size whose workgroup memory the device has.
fn tile_rows(ctx: &Ctx, n_q: u64, d: u64, dv: u64) -> Option<u32> {
    let room = u64::from(ctx.caps.limits.max_compute_workgroup_storage_size);
    let invocations = u64::from(ctx.caps.limits.max_compute_invocations_per_workgroup);
    if n_q <= VEC_MAX_Q || !d.is_multiple_of(4) || !dv.is_multiple_of(4) {
        return None;
    }
    TILE_BQ
        .into_iter()
        .find(|&bq| tile_storage(u64::from(bq), d, dv) <= room && u64::from(4 * bq) <= invocations)
}

fn coop_key(mask: Option<DType>, sinks: bool, (d, dv): (u32, u32)) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttnCoop {
            mask: mask.is_some(),
            sinks,
            d,
            dv,
        },
        dtypes: attn_dtypes(DType::F16, DType::F16, mask),
        wg: 128,
    }
}

/// Largest head sizes of `flash_attn_coop.wgsl`: a subgroup holds its q as d / 16 fragments and
/// its output as dv / 16 accumulators, beside two score accumulators.
const COOP_MAX_HEAD: u64 = 128;
/// Smallest K head size `flash_attn_coop.wgsl` takes: its softmax costs the same for every head
/// size, so the cooperative products pay for it only from heads of 64 on (the measurements:
/// bench/results/HISTORY.md, "coop flash attention head sizes").
const COOP_MIN_HEAD: u64 = 64;
/// Keys from which heads of 32 (MiniLM's) take `flash_attn_coop.wgsl` too: over 128 keys and
/// more its products pay for the softmax, over 16 they do not (bench/results/
/// 2026-12-07-session35.md, "heads of 32").
const COOP_SMALL_HEAD_MIN_KV: u64 = 128;

/// Workgroup memory of `flash_attn_coop.wgsl` (q's 64 rows, then K tiles of 32, padded by 8
/// halves, Vᵀ of dv rows of 40 halves, f32 scores and f16 probabilities of 64 rows, four
/// 16-byte words of key bits and range).
fn coop_storage(d: u64, dv: u64) -> u64 {
    64 * (d + 8) * 2 + dv * 40 * 2 + 64 * 32 * 4 + 64 * 40 * 2 + 4 * 16
}

/// Whether `flash_attn_coop.wgsl` takes an attention of `n_q` query rows: prefill-sized,
/// cooperative matrices (as the coop products need them), f16 K and V read as whole 16-byte
/// words, head sizes multiples of 16 from [`COOP_MIN_HEAD`] (K; 32 over
/// [`COOP_SMALL_HEAD_MIN_KV`] keys) up to [`COOP_MAX_HEAD`], and the workgroup memory.
fn coop_attention(ctx: &Ctx, n_q: u64, (k, v): (&Operand, &Operand)) -> bool {
    let (d, dv) = (k.layout.ne[0], v.layout.ne[0]);
    let room = u64::from(ctx.caps.limits.max_compute_workgroup_storage_size);
    n_q > VEC_MAX_Q
        && super::matmul::coop_f16(ctx.caps)
        && k.dtype == DType::F16
        && v.dtype == DType::F16
        && (d >= COOP_MIN_HEAD || d == 32 && k.layout.ne[1] >= COOP_SMALL_HEAD_MIN_KV)
        && [d, dv]
            .iter()
            .all(|&n| n.is_multiple_of(16) && n <= COOP_MAX_HEAD)
        && vec_reads(ctx, k, d)
        && vec_reads(ctx, v, dv)
        && coop_storage(d, dv) <= room
}

/// f32 K and V of a prefill (an encoder's projections) rounded to f16 into scratch (K
/// contiguous, then V on the next 256-byte boundary) where that lets `flash_attn_coop.wgsl`
/// take them instead of the f32 tiles' scalar products: the copies read K and V once, the
/// attention reads them once per block of query rows. The rounding is the one the coop kernel
/// already applies to q and the probabilities. The copy dispatches and the staged operands;
/// `None` where the attention is not such a case.
fn stage_f16(
    ctx: &Ctx,
    n_q: u64,
    (k, v): (&Operand, &Operand),
) -> Result<Option<(Vec<Dispatch>, Operand, Operand)>> {
    if (k.dtype, v.dtype) != (DType::F32, DType::F32) || !ctx.caps.shader_f16 {
        return Ok(None);
    }
    let k16 = Operand::scratch_of(DType::F16, k.layout.ne, 0)?;
    let v_at = k16.layout.span_bytes(DType::F16).next_multiple_of(256);
    let v16 = Operand::scratch_of(DType::F16, v.layout.ne, v_at)?;
    if !coop_attention(ctx, n_q, (&k16, &v16)) {
        return Ok(None);
    }
    let copies = vec![
        super::shape::copy_into(ctx, k.clone(), k16.clone())?,
        super::shape::copy_into(ctx, v.clone(), v16.clone())?,
    ];
    Ok(Some((copies, k16, v16)))
}

fn combine_key(sinks: bool, dv: u32) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttnCombine { sinks, dv },
        dtypes: vec![DType::F32; 3],
        wg: WG_COMBINE,
    }
}

/// Whether the vec kernel can read `o` (a K or V view of head size `n`): float rows are read
/// as 16-byte words, so each must start on one and be whole ones; block rows are read by byte.
fn vec_reads(ctx: &Ctx, o: &Operand, n: u64) -> bool {
    let words = match o.dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            let size = o.dtype.type_size() as u64;
            o.layout.nb[0] == size
                && (n * size).is_multiple_of(16)
                && super::rows_on(ctx, &o.layout, 16)
        }
        _ => true,
    };
    words && n.is_multiple_of(8) && n <= VEC_MAX_HEAD
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The operands of an unsplit attention dispatch: q, K, V, the mask and the sinks (an absent
/// one bound as a placeholder the kernel compiles out), dst.
fn unsplit_operands(
    qkv: [Operand; 3],
    mask: Option<Operand>,
    sinks: Option<Operand>,
    dst: Operand,
) -> Vec<Operand> {
    let mut out = Vec::from(qkv);
    out.push(mask.unwrap_or_else(|| Operand::absent(0)));
    out.push(sinks.unwrap_or_else(|| Operand::absent(1)));
    out.push(dst);
    out
}

/// One dispatch of `groups` workgroups (each its own item).
fn unsplit(
    ctx: &Ctx,
    key: PipelineKey,
    operands: Vec<Operand>,
    op_words: [u32; OP_WORDS],
    groups: u64,
) -> Result<Vec<Dispatch>> {
    Ok(vec![Dispatch {
        key,
        operands,
        op_words,
        items: ctx.items(groups)?,
        groups: ctx.grid(groups, 1)?,
    }])
}

/// ggml_flash_attn_ext: `srcs = [q, k, v, mask?, sinks?]`.
pub(super) fn flash_attn_ext(
    ctx: &Ctx,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Result<Vec<Dispatch>> {
    let planned = plan(ctx, (scale, max_bias, softcap), None)?;
    planned.ok_or_else(|| ctx.unsupported("no attention path"))
}

/// [`flash_attn_ext`] with its result rounded to int8 into `q8x` (`quant_act.wgsl`'s layout, for
/// a Q8X mat-vec to read; `matmul::q8x_scratch`): the one-dispatch vec kernel where it runs,
/// else `None`.
pub(super) fn flash_attn_ext_q8x(
    ctx: &Ctx,
    (scale, max_bias, softcap): (f32, f32, f32),
    q8x: &Operand,
) -> Result<Option<Vec<Dispatch>>> {
    let dv = ctx.src(2)?.layout.ne[0];
    if !dv.is_multiple_of(32) {
        return Ok(None);
    }
    plan(ctx, (scale, max_bias, softcap), Some(q8x))
}

/// The attention's dispatches (into `q8x` when given, or `None` where that cannot be).
fn plan(
    ctx: &Ctx,
    (scale, max_bias, softcap): (f32, f32, f32),
    q8x: Option<&Operand>,
) -> Result<Option<Vec<Dispatch>>> {
    let (q, k, v, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    let mask = ctx.node.opt_src(3).map(|_| ctx.src(3)).transpose()?;
    let sinks = ctx.node.opt_src(4).map(|_| ctx.src(4)).transpose()?;
    let (d, dv) = check(ctx, &q, &k, &v, mask.as_ref(), sinks.as_ref(), &dst)?;
    let n_head = q.layout.ne[2];
    let n_head_log2 = 1u64 << n_head.max(1).ilog2();
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    // As ggml: the scale folds in 1/softcap, and the kernel multiplies tanh by softcap.
    let scale = if softcap != 0.0 {
        scale / softcap
    } else {
        scale
    };
    let (rk, rv) = (
        n_head / k.layout.ne[2].max(1),
        n_head / v.layout.ne[2].max(1),
    );
    let mut op = words(&[scale, max_bias, m0, m1, 0.0, softcap]);
    op[4] = ctx.items(n_head_log2)?;
    op[6] = ctx.items(rk)?;
    op[7] = ctx.items(rv)?;
    let n_rows = q.layout.ne[1] * q.layout.ne[3];
    let n_kv = k.layout.ne[1];
    let mask_dtype = mask.as_ref().map(|m| m.dtype);
    // Prefill: cooperative matrices where they run, else the f32 tiles.
    let heads = (ctx.items(d)?, ctx.items(dv)?);
    let cpu = ctx.caps.cpu_shapes;
    let staged = match q8x {
        None => stage_f16(ctx, q.layout.ne[1], (&k, &v))?,
        Some(_) => None,
    };
    let (mut out, k, v) = match staged {
        Some((copies, k16, v16)) => (copies, k16, v16),
        None => (Vec::new(), k, v),
    };
    let prefill = match coop_attention(ctx, q.layout.ne[1], (&k, &v)) {
        true => Some((coop_key(mask_dtype, sinks.is_some(), heads), 64)),
        // A CPU adapter runs prompts through the vec kernel too: one octet a workgroup.
        false if cpu => None,
        false => tile_rows(ctx, q.layout.ne[1], d, dv).map(|bq| {
            let key = tile_key(k.dtype, v.dtype, mask_dtype, sinks.is_some(), heads, bq);
            (key, bq)
        }),
    };
    if let Some((key, bq)) = prefill {
        if q8x.is_some() {
            return Ok(None);
        }
        let groups = q.layout.ne[1].div_ceil(u64::from(bq)) * n_head * q.layout.ne[3];
        let operands = unsplit_operands([q, k, v], mask, sinks, dst);
        out.extend(unsplit(ctx, key, operands, op, groups)?);
        return Ok(Some(out));
    }
    let (vec, shape) = vec_shape(
        ctx,
        VecCase {
            q_rows: q.layout.ne[1],
            k: &k,
            v: &v,
            mask: mask.as_ref(),
            n_head,
            r: gcd(rk, rv).max(1),
            max_bias,
            softcap,
        },
    )?;
    let (heads, lanes, keys, subgroups) = (
        u64::from(shape.heads),
        shape.lanes,
        shape.keys,
        shape.subgroups,
    );
    // Split walks with subgroups are cut in their own steps (32 or 64 keys).
    let vec_step = match subgroups && n_kv > VEC_UNSPLIT_KV && !cpu {
        true => u64::from(lanes / 8 * keys),
        false => VEC_STEP,
    };
    let (groups, step) = match vec {
        true => (n_rows * n_head / heads, vec_step),
        false => (n_rows * n_head, u64::from(WG_ATTN)),
    };
    // Few rows with many keys (decode): cut the keys into splits of whole steps.
    let steps = n_kv.div_ceil(step);
    let min_steps = if vec { VEC_MIN_STEPS } else { 1 };
    let target = match (vec && n_kv <= VEC_UNSPLIT_KV, cpu) {
        (true, _) => 1,
        (false, false) => SPLIT_TARGET_GROUPS / groups.max(1),
        (false, true) => CPU_SPLIT_TARGET_GROUPS / groups.max(1),
    };
    let want = target
        .min(steps / min_steps)
        .min(u64::from(COMBINE_MAX_SPLITS));
    let (d, dv) = (ctx.items(d)?, ctx.items(dv)?);
    let opts = |split| -> Result<VecOpts> { Ok(VecOpts { split, ..shape }) };
    if let Some(out) = q8x {
        if !vec || want >= 2 || lanes < dv / 4 {
            return Ok(None);
        }
        let key = vec_key(
            k.dtype,
            v.dtype,
            mask_dtype,
            sinks.is_some(),
            (d, dv),
            VecOpts {
                q8x: true,
                ..opts(false)?
            },
        );
        let operands = unsplit_operands([q, k, v], mask, sinks, out.clone());
        return unsplit(ctx, key, operands, op, groups).map(Some);
    }
    if want < 2 {
        let key = match vec {
            true => vec_key(
                k.dtype,
                v.dtype,
                mask_dtype,
                sinks.is_some(),
                (d, dv),
                opts(false)?,
            ),
            false => flash_attn_key(k.dtype, v.dtype, mask_dtype, sinks.is_some(), d, dv, false),
        };
        let operands = unsplit_operands([q, k, v], mask, sinks, dst);
        return unsplit(ctx, key, operands, op, groups).map(Some);
    }
    let per = steps.div_ceil(want) * step;
    let key = match vec {
        true => vec_key(k.dtype, v.dtype, mask_dtype, false, (d, dv), opts(true)?),
        false => flash_attn_key(k.dtype, v.dtype, mask_dtype, false, d, dv, true),
    };
    let split = Split {
        key,
        splits: n_kv.div_ceil(per),
        per,
        groups,
        rows: n_rows * n_head,
        n_head,
        dv,
    };
    split_dispatches(ctx, split, [q, k, v], mask, sinks, dst, op).map(Some)
}

/// The head sizes `(d, dv)` of an attention this planner takes, or why it takes none.
fn check(
    ctx: &Ctx,
    q: &Operand,
    k: &Operand,
    v: &Operand,
    mask: Option<&Operand>,
    sinks: Option<&Operand>,
    dst: &Operand,
) -> Result<(u64, u64)> {
    ctx.require(
        q.dtype == DType::F32
            && KV.contains(&k.dtype)
            && KV.contains(&v.dtype)
            && mask.is_none_or(|m| matches!(m.dtype, DType::F32 | DType::F16))
            && sinks.is_none_or(|s| s.dtype == DType::F32)
            && dst.dtype == DType::F32,
        "f32 q and sinks; f32, f16, bf16, q8_0 or q4_0 K/V; f32 or f16 mask",
    )?;
    let mut dtypes = vec![k.dtype, v.dtype];
    dtypes.extend(mask.map(|m| m.dtype));
    ctx.require_f16(&dtypes)?;
    let (d, dv) = (k.layout.ne[0], v.layout.ne[0]);
    let whole_blocks = |o: &Operand, n: u64| n.is_multiple_of(o.dtype.block_size() as u64);
    if d > MAX_HEAD || dv > MAX_HEAD || !whole_blocks(k, d) || !whole_blocks(v, dv) {
        return Err(ctx.unsupported(format!(
            "head sizes d = {d}, dv = {dv}: at most {MAX_HEAD}, whole blocks for quantized K/V"
        )));
    }
    Ok((d, dv))
}

/// A split attention: `splits` partial results of `per` keys each, merged per row.
struct Split {
    key: PipelineKey,
    per: u64,
    splits: u64,
    /// Workgroups of one split's partials.
    groups: u64,
    /// Query rows times heads.
    rows: u64,
    n_head: u64,
    dv: u32,
}

/// The partials of a split attention into scratch, then `flash_attn_combine.wgsl`'s merge.
fn split_dispatches(
    ctx: &Ctx,
    s: Split,
    [q, k, v]: [Operand; 3],
    mask: Option<Operand>,
    sinks: Option<Operand>,
    dst: Operand,
    mut op: [u32; OP_WORDS],
) -> Result<Vec<Dispatch>> {
    op[8] = ctx.items(s.per)?;
    op[9] = ctx.items(s.splits)?;
    let scratch = Operand::scratch(DType::F32, s.rows * s.splits * (u64::from(s.dv) + 2))?;
    let mut cop = [0u32; OP_WORDS];
    cop[0] = ctx.items(s.n_head)?;
    cop[1] = ctx.items(q.layout.ne[1])?;
    cop[2] = ctx.items(s.splits)?;
    let partials = Dispatch {
        key: s.key,
        operands: vec![
            q,
            k,
            v,
            mask.unwrap_or_else(|| Operand::absent(0)),
            Operand::absent(1),
            scratch.clone(),
        ],
        op_words: op,
        items: ctx.items(s.groups)?,
        groups: ctx.grid(s.groups * s.splits, 1)?,
    };
    let chunks = u64::from(s.dv.div_ceil(COMBINE_COLS));
    let combine = Dispatch {
        key: combine_key(sinks.is_some(), s.dv),
        operands: vec![scratch, sinks.unwrap_or_else(|| Operand::absent(0)), dst],
        op_words: cop,
        items: ctx.items(s.rows)?,
        groups: ctx.grid(s.rows * chunks, 1)?,
    };
    Ok(vec![partials, combine])
}

/// What the decode kernel's shape depends on.
struct VecCase<'a> {
    /// Query rows of a head.
    q_rows: u64,
    k: &'a Operand,
    v: &'a Operand,
    mask: Option<&'a Operand>,
    n_head: u64,
    /// Query heads that share a K head and a V head.
    r: u64,
    max_bias: f32,
    softcap: f32,
}

/// Whether `flash_attn_vec.wgsl` takes this attention (else `flash_attn.wgsl`), and its options
/// unsplit: the first shape the device has room for.
fn vec_shape(ctx: &Ctx, c: VecCase<'_>) -> Result<(bool, VecOpts)> {
    let (d, dv) = (c.k.layout.ne[0], c.v.layout.ne[0]);
    let (n_kv, n_head, r) = (c.k.layout.ne[1], c.n_head, c.r);
    let cpu = ctx.caps.cpu_shapes;
    // The vec kernel sums across octets of lanes: through subgroup shuffles with subgroups of 8
    // to WG_VEC lanes, else through workgroup memory (browsers, whose WGSL cannot enable
    // subgroups yet). Without subgroups it still beats `flash_attn.wgsl` on decode, unsplit and
    // split (bench/results/HISTORY.md, "vec kernel without subgroups").
    let lanes_least = if cpu { CPU_VEC_SHAPE.0 } else { WG_VEC };
    let subgroups = ctx.caps.subgroups
        && ctx.caps.subgroup_min_size >= 8
        && ctx.caps.subgroup_max_size <= lanes_least;
    let vec = (c.q_rows <= VEC_MAX_Q || cpu) && vec_reads(ctx, c.k, d) && vec_reads(ctx, c.v, dv);
    let max_out = match n_kv <= VEC_SHORT_KV {
        true => VEC_MAX_OUT / 2,
        false => VEC_MAX_OUT,
    };
    // Unsplit caches take one head a workgroup: more workgroups walk the keys side by side
    // (their K/V rows are read once per head, from L2 after the first). Split ones the most
    // heads that share K/V, within `max_out`, fewer where the device lacks the workgroup memory
    // (the octet sums without subgroups take lanes · heads · keys floats).
    let heads_ok = |g: u64| r.is_multiple_of(g) && n_head.is_multiple_of(g) && g * dv <= max_out;
    let candidates: Vec<u64> = match n_kv <= VEC_UNSPLIT_KV {
        true => vec![1],
        false => (1..=VEC_MAX_HEADS).rev().filter(|&g| heads_ok(g)).collect(),
    };
    // The kernel's shape: the first the device has room for, else no vec kernel.
    let mask_heads = c.mask.is_some_and(|m| m.layout.ne[2] > 1) || c.max_bias > 0.0;
    let room = u64::from(ctx.caps.limits.max_compute_workgroup_storage_size);
    let most = ctx.caps.limits.max_compute_invocations_per_workgroup;
    let shaped = |heads: u64, (lanes, keys): (u32, u32), split| {
        Ok(VecOpts {
            heads: ctx.items(heads)?,
            lanes,
            keys,
            split,
            mask_heads,
            softcap: c.softcap != 0.0,
            q8x: false,
            subgroups,
        })
    };
    let fits = |heads: u64, shape: (u32, u32)| -> Result<bool> {
        let o = shaped(heads, shape, false)?;
        Ok(shape.0 <= most && vec_storage(&o, (d, dv), c.mask.is_some()) <= room)
    };
    let split_shape = [(WG_VEC, split_keys(d, n_kv))];
    let shapes: &[(u32, u32)] = match (n_kv <= VEC_UNSPLIT_KV, subgroups) {
        _ if cpu => &[CPU_VEC_SHAPE],
        (true, _) => &VEC_UNSPLIT_SHAPES,
        (false, true) => &split_shape,
        (false, false) => &[(WG_VEC, 1)],
    };
    let mut pick = None;
    'pick: for &g in &candidates {
        for &shape in shapes {
            let sums = g * u64::from(shape.1);
            if (subgroups || sums <= VEC_SUMS_WITHOUT_SUBGROUPS) && fits(g, shape)? {
                pick = Some((g, shape));
                break 'pick;
            }
        }
    }
    let vec = vec && pick.is_some();
    let (heads, shape) = pick.unwrap_or((1, (WG_VEC, VEC_KEYS)));
    Ok((vec, shaped(heads, shape, false)?))
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys = Vec::new();
    for k in KV {
        for v in KV {
            keys.push(flash_attn_key(k, v, Some(DType::F16), false, 64, 64, false));
            keys.push(flash_attn_key(k, v, Some(DType::F16), false, 64, 64, true));
            let o = |heads, split| VecOpts {
                heads,
                lanes: WG_VEC,
                keys: VEC_KEYS,
                split,
                mask_heads: split,
                softcap: !split,
                q8x: false,
                subgroups: true,
            };
            let (d, m) = ((64, 64), Some(DType::F16));
            keys.push(vec_key(k, v, m, true, d, o(4, false)));
            keys.push(vec_key(k, v, m, false, d, o(8, true)));
            // Split walks of 2 keys an octet (`split_keys`), heads of 64 and of 128.
            let two = |heads| VecOpts {
                keys: 2,
                ..o(heads, true)
            };
            keys.push(vec_key(k, v, m, false, d, two(8)));
            keys.push(vec_key(k, v, m, false, (128, 128), two(4)));
            // Without subgroups as the planner shapes them: at most 4 sums a step.
            let sg_off = |heads, keys, split| VecOpts {
                keys,
                subgroups: false,
                ..o(heads, split)
            };
            keys.push(vec_key(k, v, m, true, d, sg_off(1, 4, false)));
            keys.push(vec_key(k, v, m, false, d, sg_off(4, 1, true)));
            for (lanes, keys_a_step) in VEC_UNSPLIT_SHAPES {
                let unsplit = VecOpts {
                    lanes,
                    keys: keys_a_step,
                    ..o(1, false)
                };
                keys.push(vec_key(k, v, m, false, d, unsplit));
            }
            let unsplit = VecOpts {
                lanes: VEC_UNSPLIT_SHAPES[0].0,
                keys: VEC_UNSPLIT_SHAPES[0].1,
                ..o(1, false)
            };
            for subgroups in [true, false] {
                let q8x = VecOpts {
                    q8x: true,
                    subgroups,
                    ..unsplit
                };
                keys.push(vec_key(k, v, m, true, d, q8x));
            }
        }
    }
    for k in KV {
        keys.push(tile_key(k, k, Some(DType::F16), false, (64, 64), 16));
    }
    for (mask, sinks, heads) in [
        (Some(DType::F16), false, (128, 128)),
        (Some(DType::F32), true, (64, 64)),
        (None, true, (128, 64)),
    ] {
        keys.push(coop_key(mask, sinks, heads));
    }
    for mask in [None, Some(DType::F32)] {
        for sinks in [false, true] {
            for (d, dv, bq) in [(40, 40, 32), (128, 128, 32), (256, 256, 8), (192, 128, 16)] {
                let (k, v) = (DType::F32, DType::F16);
                keys.push(tile_key(k, v, mask, sinks, (d, dv), bq));
            }
            for (d, dv) in [(40, 40), (128, 128), (256, 256), (192, 128), (1024, 1024)] {
                keys.push(flash_attn_key(
                    DType::F32,
                    DType::F16,
                    mask,
                    sinks,
                    d,
                    dv,
                    false,
                ));
                keys.push(flash_attn_key(
                    DType::F32,
                    DType::F16,
                    mask,
                    false,
                    d,
                    dv,
                    true,
                ));
                keys.push(combine_key(sinks, dv));
            }
            for (d, dv, heads) in [
                (40, 40, 7),
                (128, 128, 4),
                (64, 64, 8),
                (256, 256, 2),
                (192, 128, 1),
            ] {
                for (split, mask_heads, softcap) in [(false, false, true), (true, true, false)] {
                    let o = VecOpts {
                        heads,
                        lanes: WG_VEC,
                        keys: VEC_KEYS,
                        split,
                        mask_heads,
                        softcap,
                        q8x: false,
                        subgroups: !split,
                    };
                    keys.push(vec_key(DType::F16, DType::BF16, mask, sinks, (d, dv), o));
                }
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests;
