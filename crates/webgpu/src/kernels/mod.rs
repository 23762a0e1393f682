//! The kernel library: one WGSL file per op family (embedded at build time), the Rust beside
//! it that specializes a family into variants, the typed key compiled pipelines are cached
//! under, and the facts of each family the planner reads (its limits and what it supports).
//! The planner (`ops`) builds on this layer; nothing here knows the planner.
//!
//! A variant is the family's source with `{{NAME}}` placeholders substituted and
//! `#if NAME` / `#else` / `#endif` line blocks kept or dropped ([`specialize`]), preceded by
//! generated binding declarations and typed load/store helpers for the dtype of each binding,
//! the shared `common.wgsl`, and `quant.wgsl` when the first source is block-quantized
//! ([`source`]).

mod flash_attn;
mod matmul;
mod quant_grid;
mod source;
mod specialize;

use wgllm_core::op::RopeMode;
use wgllm_core::DType;

pub(crate) use flash_attn::{vec_mask_terms, vec_octet_sums, COMBINE_COLS, COMBINE_MAX_SPLITS};
pub(crate) use matmul::{int8_activations, job_units, unit_decoded, VecSlots};
pub(crate) use source::source;

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
/// Block-quantized dtypes `quant.wgsl` decodes.
pub(crate) const QUANTS: [DType; 21] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
    DType::IQ2_XXS,
    DType::IQ2_XS,
    DType::IQ2_S,
    DType::IQ3_XXS,
    DType::IQ3_S,
    DType::IQ1_S,
    DType::IQ1_M,
    DType::MXFP4,
    DType::Q8_K,
];

/// The most experts `moe_router.wgsl` holds in workgroup memory (three words each: 12 KiB of
/// WebGPU's default 16).
pub(crate) const ROUTER_MAX_EXPERTS: u32 = 1024;
/// The most candidates `sample.wgsl` draws from.
pub(crate) const SAMPLE_MAX_K: u32 = 256;

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
    /// The sums start from the addends fused from the adds that read the product (not with
    /// `id`): `bias` one f32 value per row (src2), `res` an f32 residual of the result's shape
    /// (the binding after the bias, or src2); `act`, an activation's f32 expression of `x`
    /// (activations.wgsl), is applied to each sum as it is stored.
    MulMatCoop {
        bn: u32,
        id: bool,
        bias: bool,
        res: bool,
        act: Option<&'static str>,
    },
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
    /// `shape.wgsl`: gathers and per-element ops.
    Shape(ShapeKind),
    /// `upscale.wgsl`.
    Upscale(Interp),
    /// `reduce.wgsl`: one workgroup per row (or one for all).
    Reduce(ReduceKind),
    /// `mul_mat_id.wgsl`: one weight row against one (slot, token) column per workgroup.
    MulMatId,
    /// `moe_route.wgsl`: a mixture-of-experts product's (slot, token) columns bucketed by
    /// expert, one workgroup per bucket.
    MoeRoute,
    /// `moe_sum.wgsl`: the weighted sum of a mixture of experts' outputs [plus a residual], an
    /// invocation per element.
    MoeSum { residual: bool },
    /// `moe_router.wgsl`: a mixture-of-experts router's softmax, top-k and weights, one
    /// workgroup per token, reducing through subgroup operations when `subgroups`.
    MoeRouter { subgroups: bool },
    /// `seq.wgsl` and `scan.wgsl`: sequence, convolution and recurrent scan kernels.
    Seq(SeqKind),
    /// `sample.wgsl`: one row's draw from its candidates per workgroup.
    Sample,
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

/// The gathers and per-element ops of `shape.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShapeKind {
    /// `src0` tiled over dst.
    Repeat,
    /// Zeros (or with `circular` wrapped values) around `src0`.
    Pad { circular: bool },
    /// Rows of `src0` on the diagonals of dst.
    Diag,
    /// One triangle of each matrix (which one is an op word).
    Tri,
    /// `src0 + src1[:, ids]`.
    AddId,
}

/// Interpolations of `upscale.wgsl` (align-corners is a parameter, not a variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interp {
    Nearest,
    Bilinear,
    Bicubic,
}

/// The one-workgroup-per-row kernels of `reduce.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Every element of `src0` into one value (a single workgroup).
    Sum,
    SumRows,
    CumSum,
    /// Bitonic sort of the row's indices in a workgroup array of `n` (a power of two) slots.
    ArgSort {
        n: u32,
    },
}

/// The kernels of `seq.wgsl` and the recurrent scans of `scan.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SeqKind {
    SsmConv,
    Conv2d,
    Im2Col,
    SolveTri,
    /// One invocation per channel, its state row in the result.
    SsmScan,
    /// Workgroups of S invocations, one state column each.
    GatedDeltaNet,
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
