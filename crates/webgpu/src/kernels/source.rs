//! A variant's whole WGSL source: the binding declarations and typed load/store helpers for
//! the dtype of each binding, the shared `common.wgsl`, the helpers the family includes, its
//! body, all specialized by its flags and placeholders. The element-wise, row and sequence
//! families are configured here; the matrix products and attention in their own files.

use wgllm_core::op::RopeMode;
use wgllm_core::DType;

use super::flash_attn::{self, wide_kv, FLASH_ATTN_RANGE};
use super::matmul::{self, vec_norm_slot, MUL_MAT_ROUTES, QUANT_PART, QUANT_UNIT};
use super::quant_grid::grid_source;
use super::specialize::{names_flag, specialize, Spec};
use super::{
    read_only, wgsl_elem, Interp, Kernel, NormKind, PipelineKey, ReduceKind, SeqKind, ShapeKind,
    TopKStage, VecEpilogue, ITEMS_WORD, MAX_BINDINGS, OP_WORD, PARAM_WORDS, ROUTER_MAX_EXPERTS,
    SAMPLE_MAX_K,
};

const COMMON: &str = include_str!("common.wgsl");
const QUANT: &str = include_str!("quant.wgsl");
const ACTIVATIONS: &str = include_str!("activations.wgsl");
const ROPE_ANGLE: &str = include_str!("rope_angle.wgsl");
const WG_REDUCE: &str = include_str!("wg_reduce.wgsl");
const UNARY: &str = include_str!("unary.wgsl");
const BINARY: &str = include_str!("binary.wgsl");
const GET_ROWS: &str = include_str!("get_rows.wgsl");
const SET_ROWS: &str = include_str!("set_rows.wgsl");
const COPY: &str = include_str!("copy.wgsl");
const GLU: &str = include_str!("glu.wgsl");
const NORM: &str = include_str!("norm.wgsl");
const SOFTMAX: &str = include_str!("softmax.wgsl");
const ROPE: &str = include_str!("rope.wgsl");
const QUANT_ACT: &str = include_str!("quant_act.wgsl");
const TOP_K: &str = include_str!("top_k.wgsl");
const SAMPLE: &str = include_str!("sample.wgsl");
const SHAPE: &str = include_str!("shape.wgsl");
const UPSCALE: &str = include_str!("upscale.wgsl");
const REDUCE: &str = include_str!("reduce.wgsl");
const MUL_MAT_ID: &str = include_str!("mul_mat_id.wgsl");
const MOE_ROUTE: &str = include_str!("moe_route.wgsl");
const MOE_SUM: &str = include_str!("moe_sum.wgsl");
const MOE_ROUTER: &str = include_str!("moe_router.wgsl");
const SEQ: &str = include_str!("seq.wgsl");
const SCAN: &str = include_str!("scan.wgsl");

/// The complete WGSL source of a pipeline.
pub(crate) fn source(key: &PipelineKey) -> Result<String, String> {
    let n = key.dtypes.len();
    if n == 0 || n > MAX_BINDINGS {
        return Err(format!("{n} bindings (1..={MAX_BINDINGS} allowed)"));
    }
    let src0 = key.dtypes[0];
    let mut spec = Spec::default();
    spec.var("WG", key.wg);
    spec.var("PARAM_VEC4S", PARAM_WORDS / 4);
    spec.var("OP_WORD", OP_WORD);
    spec.var("ITEMS_WORD", ITEMS_WORD);
    let quant = src0.is_quantized();
    if quant {
        spec.var("QTYPE", src0.name());
        spec.var("BLOCK", src0.block_size());
        spec.var("TYPE_SIZE", src0.type_size());
        spec.var("SUBS", src0.block_size() / 32);
    }
    let body = match key.kernel {
        Kernel::MulMat { .. }
        | Kernel::MulMatVec { .. }
        | Kernel::MulMatTiled { .. }
        | Kernel::MulMatCoop { .. }
        | Kernel::MulMatSplit => matmul::configure(key, &mut spec)?,
        Kernel::FlashAttn { .. }
        | Kernel::FlashAttnTile { .. }
        | Kernel::FlashAttnCoop { .. }
        | Kernel::FlashAttnCombine { .. }
        | Kernel::FlashAttnVec { .. } => flash_attn::configure(key, &mut spec)?,
        Kernel::Map { .. }
        | Kernel::Binary { .. }
        | Kernel::Glu { .. }
        | Kernel::Norm { .. }
        | Kernel::SoftMax { .. }
        | Kernel::Rope { .. }
        | Kernel::QuantAct { .. } => element_wise(key, &mut spec)?,
        _ => rows(key, &mut spec)?,
    };
    let mut text = prelude(key)?;
    text.push_str(COMMON);
    // quant.wgsl reads src0 as words; vec4-bound weights have their own decoder.
    if quant && !matches!(key.kernel, Kernel::MulMatVec { wv4: true, .. }) {
        text.push_str(QUANT);
        text.push_str(&grid_source(src0)?);
    }
    for (on, helper) in [
        (spec.activations, ACTIVATIONS),
        (spec.rope, ROPE_ANGLE),
        (spec.units, QUANT_UNIT),
        (spec.units, QUANT_PART),
        (spec.routes, MUL_MAT_ROUTES),
        (spec.range, FLASH_ATTN_RANGE),
        (spec.wg_reduce, WG_REDUCE),
    ] {
        if on {
            text.push_str(helper);
        }
    }
    text.push_str(body);
    text.push_str(&spec.readers);
    // What the bindings are is offered to every family; a family's source reads it or not.
    let offered = [
        (quant, "QUANT"),
        (
            src0 == DType::I32 && key.dtypes[n - 1] == DType::I32,
            "COPY_INT",
        ),
    ];
    for (on, flag) in offered {
        spec.flags_if(&[(on && names_flag(&text, flag), flag)]);
    }
    specialize(&text, &spec.flags, &spec.vars)
}

/// The `enable`s, the storage binding declarations (each binding's WGSL element type, as the
/// family reads it) and the typed `load_srcK` / `store_dst` helpers.
fn prelude(key: &PipelineKey) -> Result<String, String> {
    let n = key.dtypes.len();
    let mut head = String::new();
    let mat_vec = matches!(
        key.kernel,
        Kernel::MulMatVec { .. } | Kernel::MulMatTiled { .. } | Kernel::MulMatCoop { .. }
    );
    let words = matches!(key.kernel, Kernel::Copy { .. });
    let act_quant = matches!(key.kernel, Kernel::QuantAct { .. });
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
        let access = match read_only(key) & (1 << k) {
            0 => "read_write",
            _ => "read",
        };
        head.push_str(&format!(
            "@group(0) @binding({}) var<storage, {access}> {}: array<{}>;\n",
            k + 1,
            binding_name(k, n),
            binding_elem(key, k, dt)?,
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
    Ok(head)
}

/// The WGSL element type binding `k` (of dtype `dt`) is declared with.
fn binding_elem(key: &PipelineKey, k: usize, dt: DType) -> Result<&'static str, String> {
    let n = key.dtypes.len();
    let mut elem = wgsl_elem(dt).ok_or_else(|| format!("no WGSL type for {dt}"))?;
    let mat_vec = matches!(
        key.kernel,
        Kernel::MulMatVec { .. } | Kernel::MulMatTiled { .. } | Kernel::MulMatCoop { .. }
    );
    let (glu, qkv) = match key.kernel {
        Kernel::MulMatVec { epilogue, .. } => (
            matches!(
                epilogue,
                VecEpilogue::Glu { .. } | VecEpilogue::IdGlu { .. }
            ),
            matches!(epilogue, VecEpilogue::Qkv | VecEpilogue::QkvRope { .. }),
        ),
        _ => (false, false),
    };
    let words = matches!(key.kernel, Kernel::Copy { .. });
    let act_quant = matches!(key.kernel, Kernel::QuantAct { .. });
    let q8x = matches!(key.kernel, Kernel::MulMatVec { q8x: true, .. });
    let wv4 = matches!(key.kernel, Kernel::MulMatVec { wv4: true, .. });
    let weight = k == 0 || (glu && k == 2) || (qkv && (k == 2 || k == 3));
    if mat_vec && weight && matches!(dt, DType::F16 | DType::BF16 | DType::F32) {
        elem = "u32";
    }
    if wv4 && weight {
        elem = "vec4<u32>";
    }
    // mul_mat_coop.wgsl loads f16 weights as they are (`matmul::coop_reads`).
    if matches!(key.kernel, Kernel::MulMatCoop { .. }) && key.dtypes[0] == DType::F16 && k == 0 {
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
    Ok(elem)
}

fn binding_name(k: usize, n: usize) -> String {
    if k + 1 == n {
        "dst".into()
    } else {
        format!("src{k}")
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

/// The element-wise and row-normalizing families: maps, binary ops, GLUs, norms, softmax,
/// rotations and the int8 rounding of activations.
fn element_wise(key: &PipelineKey, spec: &mut Spec) -> Result<&'static str, String> {
    Ok(match key.kernel {
        Kernel::Map { expr } => {
            spec.var("EXPR", expr);
            spec.activations = true;
            UNARY
        }
        Kernel::Binary { op } => {
            spec.var("OP", op);
            BINARY
        }
        Kernel::Glu { expr } => {
            spec.var("EXPR", expr);
            spec.activations = true;
            GLU
        }
        Kernel::Norm {
            kind,
            mul,
            vpl,
            pair,
        } => {
            spec.var("VPL", vpl);
            spec.flags_if(&[
                (mul, "MUL_W"),
                (pair, "PAIR"),
                (kind == NormKind::Norm, "NORM"),
                (kind == NormKind::L2, "L2"),
            ]);
            spec.wg_reduce = true;
            NORM
        }
        Kernel::SoftMax { mask, sinks } => {
            spec.flags_if(&[(mask, "MASK"), (sinks, "SINKS")]);
            spec.wg_reduce = true;
            SOFTMAX
        }
        Kernel::Rope {
            mode,
            freq_factors,
            pair,
            kv,
        } => {
            spec.flags_if(&[(pair, "PAIR"), (kv, "KV")]);
            if kv {
                spec.flags_if(&[(key.dtypes.get(5) == Some(&DType::I64), "IDX_I64")]);
                let cache = key.dtypes.get(7).copied().unwrap_or(DType::F32);
                spec.var("KT", wgsl_elem(cache).unwrap_or("f32"));
            }
            spec.flags.extend(match mode {
                RopeMode::Normal => &[][..],
                RopeMode::Neox => &["NEOX"],
                RopeMode::MultiSection => &["NEOX", "MROPE"],
                RopeMode::InterleavedMultiSection => &["NEOX", "MROPE", "IMROPE"],
                RopeMode::Vision => &["NEOX", "MROPE", "VISION"],
            });
            spec.flags_if(&[(freq_factors, "FREQ_FACTORS")]);
            spec.rope = true;
            ROPE
        }
        Kernel::QuantAct { norm } => {
            spec.flags_if(&[(norm, "NORM")]);
            QUANT_ACT
        }
        k => return Err(format!("{k:?} is not an element-wise kernel")),
    })
}

/// The gathers, copies, reductions, sorting and selection, expert routing, sequence kernels
/// and the draw.
fn rows(key: &PipelineKey, spec: &mut Spec) -> Result<&'static str, String> {
    let n = key.dtypes.len();
    Ok(match key.kernel {
        Kernel::GetRows => GET_ROWS,
        Kernel::Copy { per } => {
            spec.var("PER", per);
            COPY
        }
        Kernel::SetRows => {
            spec.flags_if(&[(key.dtypes.get(1) == Some(&DType::I64), "IDX_I64")]);
            let dst = key.dtypes[n - 1];
            if dst.is_quantized() {
                spec.flags_if(&[(true, "QUANT_DST"), (dst == DType::Q8_0, "Q8_0")]);
                spec.var("DST_TYPE_SIZE", dst.type_size());
            }
            SET_ROWS
        }
        Kernel::TopK {
            k,
            argmax,
            stage,
            subgroups,
        } => {
            spec.flags_if(&[
                (argmax, "ARGMAX"),
                (k > 1, "RADIX"),
                (subgroups, "SUBGROUP"),
                (stage == TopKStage::Chunks, "CHUNKS"),
                (stage == TopKStage::Merge, "MERGE"),
            ]);
            spec.var("K", k);
            spec.var("DST", n - 1);
            TOP_K
        }
        Kernel::Sample => {
            spec.var("MAX_K", SAMPLE_MAX_K);
            SAMPLE
        }
        Kernel::Shape(k) => {
            spec.flag(match k {
                ShapeKind::Repeat => "REPEAT",
                ShapeKind::Pad { circular: false } => "PAD",
                ShapeKind::Pad { circular: true } => "CIRCULAR",
                ShapeKind::Diag => "DIAG",
                ShapeKind::Tri => "TRI",
                ShapeKind::AddId => "ADD_ID",
            });
            SHAPE
        }
        Kernel::Upscale(i) => {
            spec.flag(match i {
                Interp::Nearest => "NEAREST",
                Interp::Bilinear => "BILINEAR",
                Interp::Bicubic => "BICUBIC",
            });
            UPSCALE
        }
        Kernel::Reduce(k) => {
            let (flag, n) = match k {
                ReduceKind::Sum => ("SUM", 1),
                ReduceKind::SumRows => ("SUM_ROWS", 1),
                ReduceKind::CumSum => ("CUMSUM", 1),
                ReduceKind::ArgSort { n } => ("ARGSORT", n),
            };
            spec.flag(flag);
            spec.var("SORT_N", n);
            spec.wg_reduce = !matches!(k, ReduceKind::ArgSort { .. });
            REDUCE
        }
        Kernel::MulMatId => MUL_MAT_ID,
        Kernel::MoeRoute => MOE_ROUTE,
        Kernel::MoeSum { residual } => {
            spec.flags_if(&[(residual, "RESIDUAL")]);
            spec.var("D", 2 + u32::from(residual));
            MOE_SUM
        }
        Kernel::MoeRouter { subgroups } => {
            spec.flags_if(&[(subgroups, "SUBGROUP")]);
            spec.var("MAX_E", ROUTER_MAX_EXPERTS);
            spec.wg_reduce = true;
            MOE_ROUTER
        }
        Kernel::Seq(k) => {
            let (flag, body) = match k {
                SeqKind::SsmConv => ("SSM_CONV", SEQ),
                SeqKind::Conv2d => ("CONV_2D", SEQ),
                SeqKind::Im2Col => ("IM2COL", SEQ),
                SeqKind::SolveTri => ("SOLVE_TRI", SEQ),
                SeqKind::SsmScan => ("SSM_SCAN", SCAN),
                SeqKind::GatedDeltaNet => ("GATED_DELTA_NET", SCAN),
            };
            spec.flag(flag);
            body
        }
        k => return Err(format!("{k:?} has no source of its own")),
    })
}
