//! The kernel library: WGSL sources (one file per op family, embedded at build time), their
//! specialization into variants, and the typed key compiled pipelines are cached under.
//!
//! A variant is the family's source with `{{NAME}}` placeholders substituted and
//! `#if NAME` / `#else` / `#endif` line blocks kept or dropped, preceded by generated binding
//! declarations and typed load/store helpers for the dtype of each binding, the shared
//! `common.wgsl`, and `quant.wgsl` when the first source is block-quantized.

use wgllm_core::op::RopeMode;
use wgllm_core::DType;

use crate::variants::{grid_source, Family, ReduceKind};

const COMMON: &str = include_str!("kernels/common.wgsl");
const QUANT: &str = include_str!("kernels/quant.wgsl");
const ACTIVATIONS: &str = include_str!("kernels/activations.wgsl");
const UNARY: &str = include_str!("kernels/unary.wgsl");
const BINARY: &str = include_str!("kernels/binary.wgsl");
const GET_ROWS: &str = include_str!("kernels/get_rows.wgsl");
const SET_ROWS: &str = include_str!("kernels/set_rows.wgsl");
const MUL_MAT: &str = include_str!("kernels/mul_mat.wgsl");
const MUL_MAT_VEC: &str = include_str!("kernels/mul_mat_vec.wgsl");
const MUL_MAT_TILED: &str = include_str!("kernels/mul_mat_tiled.wgsl");
const MUL_MAT_COOP: &str = include_str!("kernels/mul_mat_coop.wgsl");
const MUL_MAT_SPLIT: &str = include_str!("kernels/mul_mat_split.wgsl");
const MUL_MAT_ROUTES: &str = include_str!("kernels/mul_mat_routes.wgsl");
const QUANT_UNIT: &str = include_str!("kernels/quant_unit.wgsl");
const QUANT_PART: &str = include_str!("kernels/quant_part.wgsl");
const GLU: &str = include_str!("kernels/glu.wgsl");
const NORM: &str = include_str!("kernels/norm.wgsl");
const SOFTMAX: &str = include_str!("kernels/softmax.wgsl");
const ROPE: &str = include_str!("kernels/rope.wgsl");
const ROPE_ANGLE: &str = include_str!("kernels/rope_angle.wgsl");
const FLASH_ATTN: &str = include_str!("kernels/flash_attn.wgsl");
const FLASH_ATTN_TILE: &str = include_str!("kernels/flash_attn_tile.wgsl");
const FLASH_ATTN_COOP: &str = include_str!("kernels/flash_attn_coop.wgsl");
const FLASH_ATTN_RANGE: &str = include_str!("kernels/flash_attn_range.wgsl");
const FLASH_ATTN_KV: &str = include_str!("kernels/flash_attn_kv.wgsl");
const FLASH_ATTN_COMBINE: &str = include_str!("kernels/flash_attn_combine.wgsl");
const FLASH_ATTN_VEC: &str = include_str!("kernels/flash_attn_vec.wgsl");
const TOP_K: &str = include_str!("kernels/top_k.wgsl");
const WG_REDUCE: &str = include_str!("kernels/wg_reduce.wgsl");
const COPY: &str = include_str!("kernels/copy.wgsl");
const QUANT_ACT: &str = include_str!("kernels/quant_act.wgsl");

/// u32 words in one dispatch's parameter slot (see `common.wgsl`).
pub(crate) const PARAM_WORDS: usize = 192;
/// Bytes of one parameter slot.
pub(crate) const PARAM_BYTES: u64 = PARAM_WORDS as u64 * 4;
/// Storage bindings one kernel may have (each has a 12-word descriptor). Kernels with more than
/// WebGPU's default 8 storage buffers per stage are only planned where the device allows them
/// (the fused KV store, the attention input mat-vec).
pub(crate) const MAX_BINDINGS: usize = 11;
/// First word of the op's own parameters, and how many there are.
pub(crate) const OP_WORD: usize = 12 * MAX_BINDINGS;
pub(crate) const OP_WORDS: usize = 16;
/// Word holding the number of work items.
pub(crate) const ITEMS_WORD: usize = OP_WORD + OP_WORDS;
const _: () = assert!(ITEMS_WORD < PARAM_WORDS, "the parameter slot is too small");
/// Output columns per workgroup of `flash_attn_combine.wgsl`, and the most splits it merges.
pub(crate) const COMBINE_COLS: u32 = 32;
pub(crate) const COMBINE_MAX_SPLITS: u32 = 512;

/// A kernel family and the variant fields that change its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `unary.wgsl`: `dst = EXPR(x)` element by element, `x` the source value in f32.
    Map { expr: &'static str },
    /// `binary.wgsl`: `dst = src0 OP src1` with broadcast; `op` is `+`, `-`, `*` or `/`.
    Binary { op: &'static str },
    /// `get_rows.wgsl`.
    GetRows,
    /// `set_rows.wgsl`.
    SetRows,
    /// `mul_mat.wgsl`, `tn` output columns per workgroup.
    MulMat { tn: u32 },
    /// `mul_mat_vec.wgsl` with `quant_unit.wgsl`: at most `nc` activation columns, `rpw` weight
    /// rows per workgroup, reduced through workgroup memory. src1 is bound as vec4s, f16/bf16/f32
    /// weights as raw words.
    MulMatVec {
        nc: u32,
        rpw: u32,
        epilogue: VecEpilogue,
        /// Int8 activations (src1: `quant_act.wgsl`'s words) and integer dot products
        /// (`partq` decoders), a lane per unit.
        q8x: bool,
        /// The activations are `rms_norm(h) · g` of the bound `h` (a fused norm prologue).
        norm: bool,
        /// The weights are bound read-only (`var<storage, read>`): they are weight leaves no
        /// other binding of the dispatch shares, and the driver may then take its read-only
        /// load path.
        ro_weights: bool,
        /// The weights are bound as vec4<u32>s (WV4), read 16 bytes a load where a decoder
        /// reads aligned words four at a time (q4_K's and q5_K's int8 jobs): the planner
        /// checks that every weight row starts on a 16-byte boundary.
        wv4: bool,
    },
    /// `mul_mat_tiled.wgsl` with `quant_unit.wgsl`: `bm` (64 or 128) × 64 output tiles,
    /// bindings as for `MulMatVec`. `id`: ggml_mul_mat_id's columns routed by expert
    /// (`mul_mat_routes.wgsl`; src2 the routes of `moe_route.wgsl`).
    MulMatTiled { bm: u32, id: bool },
    /// `mul_mat_coop.wgsl` with `quant_unit.wgsl`: cooperative matrices (f16 operands, f32
    /// accumulation), `wg` × `bn` output tiles (a weight row per invocation), bindings as for
    /// `MulMatVec` but for f16 weights (vec4<f16>, no decoder); `id` as for `MulMatTiled`.
    MulMatCoop { bn: u32, id: bool },
    /// `mul_mat_split.wgsl`: the sum of a `MulMatCoop` product's splits along k (f32 slices
    /// in src0) into dst.
    MulMatSplit,
    /// `glu.wgsl`: `dst = EXPR(x, g)`.
    Glu { expr: &'static str },
    /// `norm.wgsl`, one workgroup per row; `mul`: times a weight row (a fused ggml_mul).
    /// `vpl`: values per lane kept in registers. `pair` (with `mul`): two norms × weights of
    /// the same kind and eps, the first's rows then the second's.
    Norm {
        kind: NormKind,
        mul: bool,
        vpl: u32,
        pair: bool,
    },
    /// `softmax.wgsl`, one workgroup per row; which optional sources are bound.
    SoftMax { mask: bool, sinks: bool },
    /// `rope.wgsl`: the mode (pairing and position sections), with or without frequency
    /// factors; `pair`: two tensors (q and k) at the same positions in one dispatch.
    Rope {
        mode: RopeMode,
        freq_factors: bool,
        pair: bool,
        /// With `pair`: k into the K cache and v into the V cache at the step's rows.
        kv: bool,
    },
    /// `flash_attn.wgsl`, one workgroup per query row and head (per split of its keys when
    /// `split`): which optional sources are bound, the K head size `d` and the V head size `dv`.
    FlashAttn {
        mask: bool,
        sinks: bool,
        d: u32,
        dv: u32,
        split: bool,
    },
    /// `flash_attn_tile.wgsl`, prefill attention: one workgroup per block of `wg / 4` query
    /// rows of a head, K and V read a tile of keys at a time for the whole block.
    FlashAttnTile {
        mask: bool,
        sinks: bool,
        d: u32,
        dv: u32,
    },
    /// `flash_attn_coop.wgsl`, prefill attention on cooperative matrices: one workgroup per
    /// block of 64 query rows of a head, f16 K/V bound as vec4<u32> words.
    FlashAttnCoop {
        mask: bool,
        sinks: bool,
        d: u32,
        dv: u32,
    },
    /// `flash_attn_combine.wgsl`: merges split partial results, with or without sinks.
    FlashAttnCombine { sinks: bool, dv: u32 },
    /// `flash_attn_vec.wgsl`, decode attention: one workgroup per query row and group of
    /// `heads` query heads of one K/V head (per split of the keys when `split`), octet score
    /// sums through subgroup shuffles with `subgroups`, else through workgroup memory;
    /// f32/f16/bf16 K/V are bound as vec4<u32> words. `mask_heads`: the mask terms differ per
    /// head (several mask heads, or ALiBi); `softcap`: logits are softcapped; `q8x`: the result
    /// is stored rounded to int8 per unit of 32 in `quant_act.wgsl`'s layout (dst i32 words) for
    /// a Q8X mat-vec to read.
    FlashAttnVec {
        mask: bool,
        mask_heads: bool,
        softcap: bool,
        sinks: bool,
        d: u32,
        dv: u32,
        heads: u32,
        /// Keys an octet takes per step.
        keys: u32,
        split: bool,
        q8x: bool,
        subgroups: bool,
    },
    /// `top_k.wgsl`: the `k` largest, or argmax (`k` = 1, NaN lowest), in one pass or in the
    /// chunks-then-merge stages of long rows; `k` = 1 reduces through subgroup operations when
    /// `subgroups`.
    TopK {
        k: u32,
        argmax: bool,
        stage: TopKStage,
        subgroups: bool,
    },
    /// `copy.wgsl`: 16-byte words from src0 to dst, `per` per invocation; both bindings are
    /// vec4<u32> (described as i32 words).
    Copy { per: u32 },
    /// `quant_act.wgsl`: f32 activations (`h · g` and the sums of h² with `norm`) rounded to
    /// int8 per unit of 32 for a Q8X mat-vec, a lane per unit; src0 (and g) bound as vec4<f32>,
    /// the destination (i32 words) as vec4<u32>.
    QuantAct { norm: bool },
    /// The families of `variants.rs` (shape, upscale, reductions, mul_mat_id, sequence).
    Family(Family),
}

/// What `mul_mat_vec.wgsl` does with the product before storing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VecEpilogue {
    /// Store it.
    None,
    /// Add a residual (a fused ggml_add).
    Add,
    /// Pair it with the product of a second weight through a GLU `EXPR(x, g)` (a fused
    /// ggml_glu_split of the gate and up projections).
    Glu { expr: &'static str },
    /// Three weights of one activation (q, k, v projections: src0, src2, src3) into three
    /// results (src4, src5, dst), each workgroup's rows from one of them.
    Qkv,
    /// [`VecEpilogue::Qkv`] with q and k rotated (RoPE, normal or `neox` pairs, with or without
    /// frequency factors) and k and v stored into the KV caches: a step's attention input in
    /// one dispatch (`mul_mat_vec.wgsl`'s ROPE).
    QkvRope { neox: bool, freq_factors: bool },
    /// ggml_mul_mat_id: src0 holds the experts' weights (dim 2), src2 the i32 expert ids, and
    /// each workgroup column (workgroup z) is one (expert slot, token) of the result.
    Id,
    /// [`VecEpilogue::Id`] and [`VecEpilogue::Glu`] together: the gate experts (src0) and the
    /// up experts (src2) of each column's expert, ids at src3, `EXPR(x, g)` stored.
    IdGlu { expr: &'static str },
}

/// How `top_k.wgsl` covers a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopKStage {
    /// One workgroup per row.
    Whole,
    /// One workgroup per chunk of a row, writing candidates to scratch.
    Chunks,
    /// One workgroup per row, merging the chunks' candidates.
    Merge,
}

/// The row normalizations of `norm.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormKind {
    Rms,
    Norm,
    L2,
}

/// What identifies a compiled pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub kernel: Kernel,
    /// dtype of each storage binding in binding order; the last is the destination.
    pub dtypes: Vec<DType>,
    /// Invocations per workgroup.
    pub wg: u32,
}

/// WGSL element type a binding of `dtype` is declared with.
pub(crate) fn wgsl_elem(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("f32"),
        DType::F16 => Some("f16"),
        DType::I32 => Some("i32"),
        // Read as raw words: bf16 pairs, i64 halves, quantized blocks.
        DType::BF16 | DType::I64 => Some("u32"),
        d if d.is_quantized() => Some("u32"),
        _ => None,
    }
}

/// How a binding's descriptor counts offsets and strides: in elements, except block-quantized
/// dtypes (bytes), and returns the element size in those units' bytes.
pub(crate) fn unit_bytes(dtype: DType) -> u64 {
    if dtype.is_quantized() {
        1
    } else {
        dtype.type_size() as u64
    }
}

fn binding_name(k: usize, n: usize) -> String {
    if k + 1 == n {
        "dst".into()
    } else {
        format!("src{k}")
    }
}

/// Binding indices of a mat-vec's norm weight `g`, the rotation's positions `p`, frequency
/// factors `ff` and cache rows `s`, QKV results `oq`, `ok` and result `d`: the sources (2, 3
/// with ADD or GLU, 4 with QKV), then g with a norm prologue, then p, [ff], s with a rotation
/// (ff only with frequency factors), then the results.
pub(crate) struct VecSlots {
    pub g: usize,
    pub p: usize,
    pub ff: usize,
    pub s: usize,
    pub oq: usize,
    pub ok: usize,
    pub d: usize,
}

impl VecSlots {
    pub(crate) fn new(epilogue: VecEpilogue, norm: bool) -> VecSlots {
        let sources = match epilogue {
            VecEpilogue::None => 2,
            VecEpilogue::Add | VecEpilogue::Glu { .. } | VecEpilogue::Id => 3,
            VecEpilogue::Qkv | VecEpilogue::QkvRope { .. } | VecEpilogue::IdGlu { .. } => 4,
        };
        let p = sources + usize::from(norm);
        // Frequency factors are bound only when the rotation has them.
        let ff = match epilogue {
            VecEpilogue::QkvRope { freq_factors, .. } => usize::from(freq_factors),
            _ => 0,
        };
        let out = match epilogue {
            VecEpilogue::QkvRope { .. } => p + 2 + ff,
            _ => p,
        };
        match epilogue {
            VecEpilogue::Qkv | VecEpilogue::QkvRope { .. } => VecSlots {
                g: sources,
                p,
                ff: p + ff,
                s: p + 1 + ff,
                oq: out,
                ok: out + 1,
                d: out + 2,
            },
            _ => VecSlots {
                g: sources,
                p: 0,
                ff: 0,
                s: 0,
                oq: 0,
                ok: 0,
                d: out,
            },
        }
    }
}

/// The binding of a mat-vec's norm weight, when it has a norm prologue.
fn vec_norm_slot(k: &Kernel) -> Option<usize> {
    match *k {
        Kernel::MulMatVec {
            epilogue,
            norm: true,
            ..
        } => Some(VecSlots::new(epilogue, true).g),
        _ => None,
    }
}

/// `fn load_NAME(i: u32) -> f32` for a readable dtype.
fn loader(name: &str, dtype: DType) -> Option<String> {
    let body = match dtype {
        DType::F32 => format!("{name}[i]"),
        DType::F16 | DType::I32 => format!("f32({name}[i])"),
        DType::BF16 => {
            format!("bitcast<f32>(((({name}[i >> 1u]) >> ((i & 1u) * 16u)) & 0xffffu) << 16u)")
        }
        _ => return None,
    };
    Some(format!(
        "fn load_{name}(i: u32) -> f32 {{\n    return {body};\n}}\n"
    ))
}

/// `fn store_dst(i: u32, v: f32)` for a writable dtype.
fn storer(dtype: DType) -> Option<String> {
    let v = match dtype {
        DType::F32 => "v",
        DType::F16 => "f16(v)",
        DType::I32 => "i32(v)",
        _ => return None,
    };
    Some(format!(
        "fn store_dst(i: u32, v: f32) {{\n    dst[i] = {v};\n}}\n"
    ))
}

/// Expands `#unroll NAME COUNT` … `#endunroll` line blocks: the block repeated COUNT times (a
/// number, or a `vars` name whose value is one), with `$NAME` replaced by 0, 1, … in each copy;
/// blocks nest. WGSL has no unroll attribute, and drivers leave loops over private arrays rolled
/// often enough that such arrays go to slow local memory: kernels unroll by hand with this.
fn unroll(src: &str, vars: &[(&str, String)]) -> Result<String, String> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < lines.len() {
        let Some(spec) = lines[i].trim_start().strip_prefix("#unroll ") else {
            if lines[i].trim_start().starts_with("#endunroll") {
                return Err("#endunroll without #unroll".into());
            }
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
            continue;
        };
        let mut words = spec.split_whitespace();
        let (Some(name), Some(count), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("malformed '#unroll {spec}' (want NAME COUNT)"));
        };
        let count: usize = match vars.iter().find(|(n, _)| *n == count) {
            Some((_, v)) => v.parse(),
            None => count.parse(),
        }
        .map_err(|_| format!("'#unroll {spec}': COUNT is not a number"))?;
        let (mut depth, mut end) = (1, i + 1);
        while end < lines.len() {
            let t = lines[end].trim_start();
            if t.starts_with("#unroll ") {
                depth += 1;
            } else if t.starts_with("#endunroll") {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            end += 1;
        }
        if depth != 0 {
            return Err(format!("'#unroll {spec}' without #endunroll"));
        }
        let body = unroll(&lines[i + 1..end].join("\n"), vars)?;
        for k in 0..count {
            out.push_str(&body.replace(&format!("${name}"), &k.to_string()));
        }
        i = end + 1;
    }
    Ok(out)
}

/// Expands `#unroll` blocks ([`unroll`]), keeps or drops `#if NAME` / `#else` / `#endif` line
/// blocks (NAME is set when it is among `flags`), then substitutes every `{{NAME}}` of `vars`.
/// Fails on unbalanced blocks or a placeholder left unset.
pub(crate) fn specialize(
    src: &str,
    flags: &[&str],
    vars: &[(&str, String)],
) -> Result<String, String> {
    let src = &unroll(src, vars)?;
    let mut out = String::with_capacity(src.len());
    // For each open block: (this branch is kept, the enclosing context is kept).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let active = |stack: &[(bool, bool)]| stack.last().is_none_or(|&(on, outer)| on && outer);
    for line in src.lines() {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("#if ") {
            let outer = active(&stack);
            stack.push((flags.contains(&name.trim()), outer));
        } else if t.starts_with("#else") {
            let top = stack.last_mut().ok_or("#else without #if")?;
            top.0 = !top.0;
        } else if t.starts_with("#endif") {
            stack.pop().ok_or("#endif without #if")?;
        } else if active(&stack) {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err("#if without #endif".into());
    }
    for (name, value) in vars {
        out = out.replace(&format!("{{{{{name}}}}}"), value);
    }
    match out.find("{{") {
        Some(i) => Err(format!(
            "unset placeholder {}",
            out[i..].split("}}").next().unwrap_or("")
        )),
        None => Ok(out),
    }
}

/// The storage bindings of a pipeline declared read-only (bit k: binding k + 1): a mat-vec's
/// weights with `ro_weights` (src0; src2 of a GLU; src2 and src3 of q/k/v).
pub(crate) fn read_only(key: &PipelineKey) -> u32 {
    match key.kernel {
        Kernel::MulMatVec {
            ro_weights: true,
            epilogue,
            ..
        } => match epilogue {
            VecEpilogue::Glu { .. } | VecEpilogue::IdGlu { .. } => 0b101,
            VecEpilogue::Qkv | VecEpilogue::QkvRope { .. } => 0b1101,
            VecEpilogue::None | VecEpilogue::Add | VecEpilogue::Id => 0b1,
        },
        _ => 0,
    }
}

/// The complete WGSL source of a pipeline.
pub(crate) fn source(key: &PipelineKey) -> Result<String, String> {
    let n = key.dtypes.len();
    if n == 0 || n > MAX_BINDINGS {
        return Err(format!("{n} bindings (1..={MAX_BINDINGS} allowed)"));
    }
    let mut head = String::new();
    let mat_vec = matches!(
        key.kernel,
        Kernel::MulMatVec { .. } | Kernel::MulMatTiled { .. } | Kernel::MulMatCoop { .. }
    );
    let words = matches!(key.kernel, Kernel::Copy { .. });
    let act_quant = matches!(key.kernel, Kernel::QuantAct { .. });
    let q8x = matches!(key.kernel, Kernel::MulMatVec { q8x: true, .. });
    let wv4 = matches!(key.kernel, Kernel::MulMatVec { wv4: true, .. });
    // The unit-decoding matmuls read f16 weights as words: they need no SHADER_F16 (but for
    // the f16 KV caches the attention input mat-vec stores into, and the coop kernels).
    let f16_caches = matches!(
        key.kernel,
        Kernel::MulMatVec {
            epilogue: VecEpilogue::QkvRope { .. },
            ..
        }
    ) && key.dtypes.last() == Some(&DType::F16);
    let coop = matches!(
        key.kernel,
        Kernel::MulMatCoop { .. } | Kernel::FlashAttnCoop { .. }
    );
    let coop_f16_weights =
        matches!(key.kernel, Kernel::MulMatCoop { .. }) && key.dtypes[0] == DType::F16;
    if coop || key.dtypes.contains(&DType::F16) && (!mat_vec || f16_caches) {
        head.push_str("enable f16;\n\n");
    }
    // naga takes every loop counter for non-uniform, so it rejects cooperative matrix
    // operations inside any loop as non-uniform control flow (a derivative_uniformity
    // diagnostic); the coop kernels' loop bounds and branches are uniform per workgroup (or,
    // around a fragment load, per subgroup).
    if coop {
        head.push_str("enable wgpu_cooperative_matrix;\n");
        head.push_str("diagnostic(off, derivative_uniformity);\n\n");
    }
    for (k, &dt) in key.dtypes.iter().enumerate() {
        let mut elem = wgsl_elem(dt).ok_or_else(|| format!("no WGSL type for {dt}"))?;
        let glu = matches!(
            key.kernel,
            Kernel::MulMatVec {
                epilogue: VecEpilogue::Glu { .. } | VecEpilogue::IdGlu { .. },
                ..
            }
        );
        let qkv = matches!(
            key.kernel,
            Kernel::MulMatVec {
                epilogue: VecEpilogue::Qkv | VecEpilogue::QkvRope { .. },
                ..
            }
        );
        let weight = k == 0 || (glu && k == 2) || (qkv && (k == 2 || k == 3));
        if mat_vec && weight && matches!(dt, DType::F16 | DType::BF16 | DType::F32) {
            elem = "u32";
        }
        if wv4 && weight {
            elem = "vec4<u32>";
        }
        // mul_mat_coop.wgsl loads f16 weights as they are (`matmul::coop_reads`).
        if coop_f16_weights && k == 0 {
            elem = "vec4<f16>";
        }
        if mat_vec && k == 1 || vec_norm_slot(&key.kernel) == Some(k) || act_quant {
            elem = "vec4<f32>";
        }
        if words || wide_kv(&key.kernel, k, dt) || q8x && k == 1 || act_quant && k + 1 == n {
            elem = "vec4<u32>";
        }
        // set_rows writes blocks that share words with their neighbours (see set_rows.wgsl).
        if key.kernel == Kernel::SetRows && k + 1 == n && dt.is_quantized() {
            elem = "atomic<u32>";
        }
        let access = match read_only(key) & (1 << k) {
            0 => "read_write",
            _ => "read",
        };
        head.push_str(&format!(
            "@group(0) @binding({}) var<storage, {access}> {}: array<{elem}>;\n",
            k + 1,
            binding_name(k, n)
        ));
    }
    head.push('\n');
    // The GLU and QKV mat-vecs' other weights (bindings 2, 3) are read as words too, not
    // through a loader (the QKV results 4, 5 are stored to directly).
    let multi_vec = matches!(
        key.kernel,
        Kernel::MulMatVec {
            epilogue: VecEpilogue::Glu { .. }
                | VecEpilogue::Qkv
                | VecEpilogue::QkvRope { .. }
                | VecEpilogue::Id
                | VecEpilogue::IdGlu { .. },
            ..
        }
    );
    for (k, &dt) in key.dtypes[..n - 1].iter().enumerate() {
        let vec_read = mat_vec && (k < 2 || multi_vec || vec_norm_slot(&key.kernel) == Some(k));
        if vec_read || words || act_quant || wide_kv(&key.kernel, k, dt) {
            continue;
        }
        if let Some(l) = loader(&binding_name(k, n), dt) {
            head.push_str(&l);
        }
    }
    if let Some(s) = storer(key.dtypes[n - 1]).filter(|_| !words && !act_quant) {
        head.push_str(&s);
    }
    let src0 = key.dtypes[0];
    let quant = src0.is_quantized();
    let mut flags: Vec<&str> = Vec::new();
    let mut vars: Vec<(&str, String)> = vec![
        ("WG", key.wg.to_string()),
        ("PARAM_VEC4S", (PARAM_WORDS / 4).to_string()),
        ("OP_WORD", OP_WORD.to_string()),
        ("ITEMS_WORD", ITEMS_WORD.to_string()),
    ];
    if quant {
        flags.push("QUANT");
        vars.push(("QTYPE", src0.name().to_string()));
        vars.push(("BLOCK", src0.block_size().to_string()));
        vars.push(("TYPE_SIZE", src0.type_size().to_string()));
        vars.push(("SUBS", (src0.block_size() / 32).to_string()));
    }
    if src0 == DType::I32 && key.dtypes[n - 1] == DType::I32 {
        flags.push("COPY_INT");
    }
    let mut activations = false;
    let mut rope = false;
    let mut readers = String::new();
    let body = match key.kernel {
        Kernel::Map { expr } => {
            vars.push(("EXPR", expr.to_string()));
            activations = true;
            UNARY
        }
        Kernel::Glu { expr } => {
            vars.push(("EXPR", expr.to_string()));
            activations = true;
            GLU
        }
        Kernel::Norm {
            kind,
            mul,
            vpl,
            pair,
        } => {
            vars.push(("VPL", vpl.to_string()));
            push_flags(&mut flags, &[(mul, "MUL_W"), (pair, "PAIR")]);
            match kind {
                NormKind::Rms => {}
                NormKind::Norm => flags.push("NORM"),
                NormKind::L2 => flags.push("L2"),
            }
            NORM
        }
        Kernel::SoftMax { mask, sinks } => {
            if mask {
                flags.push("MASK");
            }
            if sinks {
                flags.push("SINKS");
            }
            SOFTMAX
        }
        Kernel::Rope {
            mode,
            freq_factors,
            pair,
            kv,
        } => {
            if pair {
                flags.push("PAIR");
            }
            if kv {
                flags.push("KV");
                if key.dtypes.get(5) == Some(&DType::I64) {
                    flags.push("IDX_I64");
                }
                let cache = key.dtypes.get(7).copied().unwrap_or(DType::F32);
                vars.push(("KT", wgsl_elem(cache).unwrap_or("f32").to_string()));
            }
            flags.extend(match mode {
                RopeMode::Normal => &[][..],
                RopeMode::Neox => &["NEOX"],
                RopeMode::MultiSection => &["NEOX", "MROPE"],
                RopeMode::InterleavedMultiSection => &["NEOX", "MROPE", "IMROPE"],
                RopeMode::Vision => &["NEOX", "MROPE", "VISION"],
            });
            if freq_factors {
                flags.push("FREQ_FACTORS");
            }
            rope = true;
            ROPE
        }
        Kernel::FlashAttn {
            mask,
            sinks,
            d,
            dv,
            split,
        } => {
            push_flags(
                &mut flags,
                &[(mask, "MASK"), (split, "SPLIT"), (sinks, "SINKS")],
            );
            vars.push(("D", d.to_string()));
            vars.push(("DV", dv.to_string()));
            vars.push(("DVP", dv.div_ceil(key.wg).to_string()));
            readers = flash_attn_readers(&key.dtypes, "DOT")?;
            FLASH_ATTN
        }
        Kernel::FlashAttnTile { mask, sinks, d, dv } => {
            push_flags(&mut flags, &[(mask, "MASK"), (sinks, "SINKS")]);
            let bq = key.wg / 4;
            if !(d.is_multiple_of(4) && dv.is_multiple_of(4) && bq.is_multiple_of(4) && bq > 0) {
                let wg = key.wg;
                return Err(format!("flash_attn_tile: d = {d}, dv = {dv}, wg = {wg}"));
            }
            vars.push(("D", d.to_string()));
            vars.push(("DV", dv.to_string()));
            vars.push(("BQ", bq.to_string()));
            // Output vec4s an invocation keeps per row (the `#unroll` count).
            vars.push(("NO", (dv / 4).div_ceil(8).to_string()));
            readers = flash_attn_readers(&key.dtypes, "ROWS")?;
            FLASH_ATTN_TILE
        }
        Kernel::FlashAttnCoop { mask, sinks, d, dv } => {
            push_flags(&mut flags, &[(mask, "MASK"), (sinks, "SINKS")]);
            if !(d.is_multiple_of(16) && dv.is_multiple_of(16) && dv <= 128 && key.wg == 128) {
                let wg = key.wg;
                return Err(format!("flash_attn_coop: d = {d}, dv = {dv}, wg = {wg}"));
            }
            vars.push(("D", d.to_string()));
            vars.push(("DV", dv.to_string()));
            // q fragments and output accumulators per subgroup (`#unroll` counts).
            vars.push(("NQ", (d / 16).to_string()));
            vars.push(("NO", (dv / 16).to_string()));
            // K words (8 halves) an invocation loads a tile: 32 keys of d / 8 over 128.
            vars.push(("KL", d.div_ceil(32).to_string()));
            FLASH_ATTN_COOP
        }
        Kernel::FlashAttnCombine { sinks, dv } => {
            if sinks {
                flags.push("SINKS");
            }
            vars.push(("DV", dv.to_string()));
            vars.push(("COLS", COMBINE_COLS.to_string()));
            vars.push(("MAX_SPLITS", COMBINE_MAX_SPLITS.to_string()));
            FLASH_ATTN_COMBINE
        }
        Kernel::FlashAttnVec {
            mask,
            mask_heads,
            softcap,
            sinks,
            d,
            dv,
            heads,
            keys,
            split,
            q8x,
            subgroups,
        } => {
            push_flags(
                &mut flags,
                &[
                    (mask, "MASK"),
                    (softcap, "SOFTCAP"),
                    (sinks, "SINKS"),
                    (split, "SPLIT"),
                    (q8x, "Q8X"),
                    (subgroups, "SUBGROUP"),
                ],
            );
            if q8x && (split || !dv.is_multiple_of(32) || key.wg < dv / 4) {
                let wg = key.wg;
                return Err(format!(
                    "flash_attn_vec to int8: dv = {dv}, wg = {wg}, split {split}"
                ));
            }
            if ![d, dv, key.wg].iter().all(|x| x.is_multiple_of(8)) || !(1..=8).contains(&keys) {
                let wg = key.wg;
                return Err(format!(
                    "flash_attn_vec: d = {d}, dv = {dv}, wg = {wg}, {keys} keys an octet"
                ));
            }
            // Octets, keys per octet and step (KB in the kernel).
            let (octets, kb) = (key.wg / 8, keys);
            vars.push(("D", d.to_string()));
            vars.push(("DV", dv.to_string()));
            vars.push(("GQ", heads.to_string()));
            vars.push(("KB", kb.to_string()));
            vars.push(("QV4", (heads * d / 4).to_string()));
            vars.push(("RED", (octets * dv).to_string()));
            vars.push(("NGQ", (octets * heads).to_string()));
            vars.push(("OSUM", vec_octet_sums(key.wg, heads, kb).to_string()));
            vars.push(("NPK", (d / 8).div_ceil(8).to_string()));
            vars.push(("NPV", (dv / 8).div_ceil(8).to_string()));
            // q loads a lane; mask rows staged per key, mask terms a lane stages (8 with a row
            // per head, else 4), keys per chunk (all keys in one without a mask).
            vars.push(("QPL", (heads * d).div_ceil(key.wg).to_string()));
            let mh = if mask_heads { heads } else { 1 };
            let msl = vec_mask_terms(mask_heads);
            let ch = if mask { msl * key.wg / mh } else { 1 << 30 };
            vars.push(("MH", mh.to_string()));
            vars.push(("MSL", msl.to_string()));
            vars.push(("CH", ch.to_string()));
            vars.push(("MSK", (msl * key.wg).to_string()));
            readers = flash_attn_readers(&key.dtypes, "VEC")?;
            FLASH_ATTN_VEC
        }
        Kernel::TopK {
            k,
            argmax,
            stage,
            subgroups,
        } => {
            if argmax {
                flags.push("ARGMAX");
            }
            if k > 1 {
                flags.push("RADIX");
            }
            if subgroups {
                flags.push("SUBGROUP");
            }
            match stage {
                TopKStage::Whole => {}
                TopKStage::Chunks => flags.push("CHUNKS"),
                TopKStage::Merge => flags.push("MERGE"),
            }
            vars.push(("K", k.to_string()));
            vars.push(("DST", (n - 1).to_string()));
            TOP_K
        }
        Kernel::QuantAct { norm } => {
            if norm {
                flags.push("NORM");
            }
            QUANT_ACT
        }
        Kernel::Family(f) => f.configure(&mut flags, &mut vars),
        Kernel::Binary { op } => {
            vars.push(("OP", op.to_string()));
            BINARY
        }
        Kernel::GetRows => GET_ROWS,
        Kernel::Copy { per } => {
            vars.push(("PER", per.to_string()));
            COPY
        }
        Kernel::SetRows => {
            if key.dtypes.get(1) == Some(&DType::I64) {
                flags.push("IDX_I64");
            }
            let dst = key.dtypes[n - 1];
            if dst.is_quantized() {
                flags.push("QUANT_DST");
                if dst == DType::Q8_0 {
                    flags.push("Q8_0");
                }
                vars.push(("DST_TYPE_SIZE", dst.type_size().to_string()));
            }
            SET_ROWS
        }
        Kernel::MulMat { tn } => {
            vars.push(("TN", tn.to_string()));
            vars.push(("PARTIAL", (tn * key.wg).to_string()));
            MUL_MAT
        }
        Kernel::MulMatVec {
            nc,
            rpw,
            epilogue,
            q8x,
            norm,
            ro_weights: _,
            wv4,
        } => {
            if q8x {
                if !crate::ops::int8_activations(src0) {
                    return Err(format!("no int8-activation decoder for {src0}"));
                }
                flags.push("Q8X");
            }
            // Units a lane's job takes (an `#unroll` count, expanded before `#if`).
            let upj = if q8x { crate::ops::job_units(src0) } else { 1 };
            if upj > 1 {
                flags.push("JOB");
            }
            vars.push(("UPJ", upj.to_string()));
            if wv4 {
                flags.push("WV4");
            }
            let mut weights = 1;
            match epilogue {
                VecEpilogue::None => {}
                VecEpilogue::Add => flags.push("ADD"),
                VecEpilogue::Id => {
                    flags.push("ID");
                    vars.push(("IDS", "2".into()));
                }
                VecEpilogue::Glu { expr } => {
                    flags.push("GLU");
                    vars.push(("EXPR", expr.to_string()));
                    activations = true;
                    weights = 2;
                }
                VecEpilogue::IdGlu { expr } => {
                    flags.extend(["ID", "GLU"]);
                    vars.push(("IDS", "3".into()));
                    vars.push(("EXPR", expr.to_string()));
                    activations = true;
                    weights = 2;
                }
                VecEpilogue::Qkv => flags.push("QKV"),
                VecEpilogue::QkvRope { neox, freq_factors } => {
                    flags.extend(["QKV", "ROPE"]);
                    rope = true;
                    if neox {
                        flags.push("NEOX");
                    }
                    if freq_factors {
                        flags.push("FREQ_FACTORS");
                    }
                    let s = VecSlots::new(epilogue, norm);
                    if key.dtypes.get(s.s) == Some(&DType::I64) {
                        flags.push("IDX_I64");
                    }
                    let cache = key.dtypes.get(s.d).copied().unwrap_or(DType::F32);
                    vars.push(("KT", wgsl_elem(cache).unwrap_or("f32").to_string()));
                    vars.push(("P", s.p.to_string()));
                    vars.push(("FF", s.ff.to_string()));
                    vars.push(("S", s.s.to_string()));
                }
            }
            let slots = VecSlots::new(epilogue, norm);
            if norm {
                flags.push("NORM");
            }
            vars.push(("G", slots.g.to_string()));
            vars.push(("OQ", slots.oq.to_string()));
            vars.push(("OK", slots.ok.to_string()));
            vars.push(("D", slots.d.to_string()));
            vars.push(("NC", nc.to_string()));
            vars.push(("RPW", rpw.to_string()));
            let sums = weights * rpw + u32::from(norm);
            vars.push(("RED", (sums * nc * key.wg).to_string()));
            // Lanes a sum of the reduction: as many as WG / sums leaves, rounded down to a power
            // of two, 1 to 8.
            let lanes = (key.wg / (sums * nc)).clamp(1, 8);
            vars.push(("RL", (1 << lanes.ilog2()).to_string()));
            // Fewer lanes than sums (a CPU adapter's shapes): each lane stores several.
            let store_loop = rpw * nc > key.wg;
            if store_loop {
                flags.push("STORE_LOOP");
            }
            vars.push((
                "NEXT",
                if store_loop { "continue" } else { "return" }.into(),
            ));
            // Integer formats load their parts undecoded (`partq`), the others as floats.
            let integer = crate::ops::int8_activations(src0);
            vars.push(("LOAD", if integer { "partq" } else { "part" }.into()));
            unit_flags(src0, &mut flags);
            MUL_MAT_VEC
        }
        Kernel::MulMatTiled { bm, id } => {
            if !matches!(bm, 64 | 128) || key.wg != 256 {
                return Err(format!(
                    "mul_mat_tiled: {bm} × 64 tiles of {} invocations",
                    key.wg
                ));
            }
            vars.push(("BM", bm.to_string()));
            // Rows (and weight parts) an invocation keeps (loads) per step.
            vars.push(("TM", (bm / 16).to_string()));
            vars.push(("WJ", (bm / 64).to_string()));
            unit_flags(src0, &mut flags);
            push_flags(&mut flags, &[(id, "ID"), (id, "ROUTE_COUNT_IN_TILE")]);
            MUL_MAT_TILED
        }
        Kernel::MulMatCoop { bn, id } => {
            // A tile's weight rows are its invocations.
            let bm = key.wg;
            if bm != 128 || !matches!(bn, 64 | 128) {
                return Err(format!("mul_mat_coop: {bm} × {bn} tiles"));
            }
            vars.push(("BM", bm.to_string()));
            vars.push(("BN", bn.to_string()));
            // Accumulators per subgroup along n, and activation vec4s per invocation and step.
            vars.push(("NF", (bn / 32).to_string()));
            vars.push(("NX", (8 * bn / bm).to_string()));
            unit_flags(src0, &mut flags);
            push_flags(&mut flags, &[(id, "ID")]);
            MUL_MAT_COOP
        }
        Kernel::MulMatSplit => MUL_MAT_SPLIT,
    };
    let mut text = head;
    text.push_str(COMMON);
    // quant.wgsl reads src0 as words; vec4-bound weights have their own decoder.
    if quant && !wv4 {
        text.push_str(QUANT);
        text.push_str(&grid_source(src0)?);
    }
    if activations {
        text.push_str(ACTIVATIONS);
    }
    if rope {
        text.push_str(ROPE_ANGLE);
    }
    // The part decoders (read through words) for all but the coop kernel's f16 weights.
    if mat_vec && !coop_f16_weights {
        text.push_str(QUANT_UNIT);
        text.push_str(QUANT_PART);
    }
    if let Kernel::MulMatTiled { id: true, .. } | Kernel::MulMatCoop { id: true, .. } = key.kernel {
        text.push_str(MUL_MAT_ROUTES);
    }
    if matches!(
        key.kernel,
        Kernel::FlashAttnTile { .. } | Kernel::FlashAttnCoop { .. }
    ) {
        text.push_str(FLASH_ATTN_RANGE);
    }
    if matches!(
        key.kernel,
        Kernel::Norm { .. }
            | Kernel::SoftMax { .. }
            | Kernel::Family(Family::Reduce(
                ReduceKind::Sum | ReduceKind::SumRows | ReduceKind::CumSum
            ))
            | Kernel::Family(Family::MoeRouter { .. })
            | Kernel::FlashAttnCombine { .. }
    ) {
        text.push_str(WG_REDUCE);
    }
    text.push_str(body);
    text.push_str(&readers);
    specialize(&text, &flags, &vars)
}

/// Mask terms a lane of `flash_attn_vec.wgsl` stages a chunk (MSL): 8 with a mask row per
/// head, else 4.
pub(crate) fn vec_mask_terms(mask_heads: bool) -> u32 {
    if mask_heads {
        8
    } else {
        4
    }
}

/// The partial q·k sums a step of `flash_attn_vec.wgsl` without subgroups exchanges through
/// workgroup memory (OSUM): one per lane, key and head.
pub(crate) fn vec_octet_sums(lanes: u32, heads: u32, keys: u32) -> u32 {
    lanes * heads * keys
}

/// Pushes each flag whose switch is on.
fn push_flags(flags: &mut Vec<&'static str>, switches: &[(bool, &'static str)]) {
    flags.extend(switches.iter().filter(|s| s.0).map(|s| s.1));
}

/// The `quant_unit.wgsl` flags of a weight dtype: its decoder and the helpers it uses.
fn unit_flags(dtype: DType, flags: &mut Vec<&str>) {
    flags.push(unit_flag(dtype));
    if dtype.is_quantized() {
        flags.push("U_BLOCKS");
    }
    if matches!(dtype, DType::Q4_K | DType::Q5_K) {
        flags.push("U_KSCALES");
    }
    if matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1) {
        flags.push("U_NIBBLES");
    }
    // Integer part decoders (`partq`), which the float ones are built from.
    if crate::ops::int8_activations(dtype) {
        flags.push("U_INTQ");
    }
}

/// The `quant_unit.wgsl` decoder of a weight dtype.
fn unit_flag(dtype: DType) -> &'static str {
    match dtype {
        DType::Q4_0 => "U_Q4_0",
        DType::Q4_1 => "U_Q4_1",
        DType::Q5_0 => "U_Q5_0",
        DType::Q5_1 => "U_Q5_1",
        DType::Q8_0 => "U_Q8_0",
        DType::Q4_K => "U_Q4_K",
        DType::Q5_K => "U_Q5_K",
        DType::Q6_K => "U_Q6_K",
        DType::F16 => "U_F16",
        DType::BF16 => "U_BF16",
        DType::F32 => "U_F32",
        _ => "U_GENERIC",
    }
}

/// Whether binding `k` of a `flash_attn_vec.wgsl` or `flash_attn_coop.wgsl` variant is a
/// float K/V read as vec4<u32>.
fn wide_kv(kernel: &Kernel, k: usize, dtype: DType) -> bool {
    matches!(
        kernel,
        Kernel::FlashAttnVec { .. } | Kernel::FlashAttnCoop { .. }
    ) && (k == 1 || k == 2)
        && matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// The K (src1) and V (src2) readers of `flash_attn_kv.wgsl` specialized for each one's dtype:
/// `kind` "DOT" for `flash_attn.wgsl` (values and q · row), "ROWS" for `flash_attn_tile.wgsl`
/// (values), "VEC" for `flash_attn_vec.wgsl` (parts).
fn flash_attn_readers(dtypes: &[DType], kind: &'static str) -> Result<String, String> {
    let mut out = String::new();
    for (name, k) in [("k", 1usize), ("v", 2)] {
        let dtype = *dtypes.get(k).ok_or("flash_attn needs K and V bindings")?;
        let mut flags = match dtype {
            DType::F32 => vec!["F32"],
            DType::F16 => vec!["F16"],
            DType::BF16 => vec!["BF16"],
            DType::Q8_0 => vec!["BLOCKS", "Q8_0"],
            DType::Q4_0 => vec!["BLOCKS"],
            d => return Err(format!("flash_attn has no {d} K/V reader")),
        };
        if kind != "ROWS" {
            flags.push(kind);
        }
        let vars = [
            ("KV", name.to_string()),
            ("SRC", format!("src{k}")),
            ("BINDING", k.to_string()),
        ];
        out.push_str(&specialize(FLASH_ATTN_KV, &flags, &vars)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_nest_and_placeholders_must_be_set() {
        let src = "a\n#if X\nb {{V}}\n#if Y\nc\n#else\nd\n#endif\n#else\ne\n#endif\nf\n";
        let v = vec![("V", "1".to_string())];
        assert_eq!(specialize(src, &["X"], &v).unwrap(), "a\nb 1\nd\nf\n");
        assert_eq!(specialize(src, &["X", "Y"], &v).unwrap(), "a\nb 1\nc\nf\n");
        assert_eq!(specialize(src, &["Y"], &v).unwrap(), "a\ne\nf\n");
        assert!(specialize(src, &["X"], &[]).unwrap_err().contains("{{V"));
        assert!(specialize("#if X\n", &[], &[]).is_err());
        assert!(specialize("#endif\n", &[], &[]).is_err());
    }

    #[test]
    fn unroll_repeats_blocks_with_their_index() {
        let v = [("N", "2".to_string())];
        let src = "a\n#unroll r N\n#unroll c 3\nx_$r_$c\n#endunroll\ny$r\n#endunroll\nb\n";
        assert_eq!(
            specialize(src, &[], &v).unwrap(),
            "a\nx_0_0\nx_0_1\nx_0_2\ny0\nx_1_0\nx_1_1\nx_1_2\ny1\nb\n"
        );
        assert!(specialize("#unroll r 2\nx\n", &[], &[]).is_err());
        assert!(specialize("#endunroll\n", &[], &[]).is_err());
        assert!(specialize("#unroll r M\nx\n#endunroll\n", &[], &[]).is_err());
        assert!(specialize("#unroll r\nx\n#endunroll\n", &[], &[]).is_err());
    }
}
