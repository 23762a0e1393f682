//! The matrix products: `mul_mat.wgsl` (generic), `mul_mat_vec.wgsl` (mat-vec with its fused
//! prologues and epilogues), `mul_mat_tiled.wgsl`, `mul_mat_coop.wgsl` (cooperative matrices),
//! `mul_mat_split.wgsl`, and the weight decoders they share (`quant_unit.wgsl`,
//! `quant_part.wgsl`).

use wgllm_core::DType;

use super::specialize::Spec;
use super::{wgsl_elem, Kernel, PipelineKey, VecEpilogue};

const MUL_MAT: &str = include_str!("mul_mat.wgsl");
const MUL_MAT_VEC: &str = include_str!("mul_mat_vec.wgsl");
const MUL_MAT_TILED: &str = include_str!("mul_mat_tiled.wgsl");
const MUL_MAT_COOP: &str = include_str!("mul_mat_coop.wgsl");
const MUL_MAT_SPLIT: &str = include_str!("mul_mat_split.wgsl");
pub(super) const MUL_MAT_ROUTES: &str = include_str!("mul_mat_routes.wgsl");
pub(super) const QUANT_UNIT: &str = include_str!("quant_unit.wgsl");
pub(super) const QUANT_PART: &str = include_str!("quant_part.wgsl");

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
pub(super) fn vec_norm_slot(k: &Kernel) -> Option<usize> {
    match *k {
        Kernel::MulMatVec {
            epilogue,
            norm: true,
            ..
        } => Some(VecSlots::new(epilogue, true).g),
        _ => None,
    }
}

/// Units of 32 a lane of the int8 mat-vec takes at a time (`jobq` in `quant_part.wgsl`): two
/// for the K formats, whose units pair up on the same quant bytes; one for the rest.
pub(crate) fn job_units(a: DType) -> u64 {
    match a {
        DType::Q4_K | DType::Q5_K | DType::Q6_K => 2,
        _ => 1,
    }
}

/// Weight dtypes with an integer part decoder (`partq` in `quant_part.wgsl`), so that their
/// mat-vec can take int8 activations and integer dot products.
pub(crate) fn int8_activations(a: DType) -> bool {
    matches!(
        a,
        DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
    )
}

/// Weight dtypes with a whole-unit decoder in `quant_unit.wgsl` (others go through `dq`, which
/// reads src0 only, so they cannot be a fused second weight).
pub(crate) fn unit_decoded(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16) || int8_activations(d)
}

/// The flags, placeholders and body of a matrix product's variant.
pub(super) fn configure(key: &PipelineKey, spec: &mut Spec) -> Result<&'static str, String> {
    let src0 = key.dtypes[0];
    // The part decoders (read through words) for all but the coop kernel's f16 weights.
    spec.units = !matches!(key.kernel, Kernel::MulMatCoop { .. }) || src0 != DType::F16;
    Ok(match key.kernel {
        Kernel::MulMat { tn } => {
            spec.units = false;
            spec.var("TN", tn);
            spec.var("PARTIAL", tn * key.wg);
            MUL_MAT
        }
        Kernel::MulMatVec { .. } => {
            mat_vec(key, spec)?;
            MUL_MAT_VEC
        }
        Kernel::MulMatTiled { bm, id } => {
            if !matches!(bm, 64 | 128) || key.wg != 256 {
                return Err(format!(
                    "mul_mat_tiled: {bm} × 64 tiles of {} invocations",
                    key.wg
                ));
            }
            spec.var("BM", bm);
            // Rows (and weight parts) an invocation keeps (loads) per step.
            spec.var("TM", bm / 16);
            spec.var("WJ", bm / 64);
            unit_flags(src0, spec);
            spec.flags_if(&[(id, "ID"), (id, "ROUTE_COUNT_IN_TILE")]);
            spec.routes = id;
            MUL_MAT_TILED
        }
        Kernel::MulMatCoop {
            bn,
            id,
            bias,
            res,
            act,
        } => {
            // A tile's weight rows are its invocations.
            let bm = key.wg;
            if bm != 128 || !matches!(bn, 64 | 128) {
                return Err(format!("mul_mat_coop: {bm} × {bn} tiles"));
            }
            if id && (bias || res || act.is_some()) {
                return Err("mul_mat_coop: an epilogue on routed columns".into());
            }
            spec.flags_if(&[(bias || res, "INIT"), (bias, "BIAS"), (res, "RES")]);
            if let Some(expr) = act {
                spec.flag("ACT");
                spec.var("ACT", expr);
                spec.activations = true;
            }
            // The bindings' descriptor slots: the addends after the activations, dst last.
            spec.var("RES", 2 + u32::from(bias));
            spec.var("DST", key.dtypes.len() - 1);
            spec.var("BM", bm);
            spec.var("BN", bn);
            // Accumulators per subgroup along n, and activation vec4s per invocation and step.
            spec.var("NF", bn / 32);
            spec.var("NX", 8 * bn / bm);
            unit_flags(src0, spec);
            spec.flags_if(&[(id, "ID")]);
            spec.routes = id;
            MUL_MAT_COOP
        }
        Kernel::MulMatSplit => {
            spec.units = false;
            MUL_MAT_SPLIT
        }
        k => return Err(format!("{k:?} is not a matrix product")),
    })
}

/// `mul_mat_vec.wgsl`'s flags and placeholders: the decoder, the prologue, the epilogue and
/// the reduction's shape.
fn mat_vec(key: &PipelineKey, spec: &mut Spec) -> Result<(), String> {
    let Kernel::MulMatVec {
        nc,
        rpw,
        epilogue,
        q8x,
        norm,
        ro_weights: _,
        wv4,
    } = key.kernel
    else {
        return Err(format!("{:?} is not a mat-vec", key.kernel));
    };
    let src0 = key.dtypes[0];
    if q8x {
        if !int8_activations(src0) {
            return Err(format!("no int8-activation decoder for {src0}"));
        }
        spec.flag("Q8X");
    }
    // Units a lane's job takes (an `#unroll` count, expanded before `#if`).
    let upj = if q8x { job_units(src0) } else { 1 };
    spec.flags_if(&[(upj > 1, "JOB"), (wv4, "WV4")]);
    spec.var("UPJ", upj);
    let weights = epilogue_flags(key, epilogue, norm, spec);
    let slots = VecSlots::new(epilogue, norm);
    spec.flags_if(&[(norm, "NORM")]);
    spec.var("G", slots.g);
    spec.var("OQ", slots.oq);
    spec.var("OK", slots.ok);
    spec.var("D", slots.d);
    spec.var("NC", nc);
    spec.var("RPW", rpw);
    let sums = weights * rpw + u32::from(norm);
    spec.var("RED", sums * nc * key.wg);
    // Lanes a sum of the reduction: as many as WG / sums leaves, rounded down to a power of
    // two, 1 to 8.
    let lanes = (key.wg / (sums * nc)).clamp(1, 8);
    spec.var("RL", 1 << lanes.ilog2());
    // Fewer lanes than sums (a CPU adapter's shapes): each lane stores several.
    let store_loop = rpw * nc > key.wg;
    spec.flags_if(&[(store_loop, "STORE_LOOP")]);
    spec.var("NEXT", if store_loop { "continue" } else { "return" });
    // Integer formats load their parts undecoded (`partq`), the others as floats.
    let integer = int8_activations(src0);
    spec.var("LOAD", if integer { "partq" } else { "part" });
    unit_flags(src0, spec);
    Ok(())
}

/// A mat-vec epilogue's flags and placeholders; returns the weights each row reads (2 for a
/// GLU's gate and up, else 1).
fn epilogue_flags(key: &PipelineKey, epilogue: VecEpilogue, norm: bool, spec: &mut Spec) -> u32 {
    match epilogue {
        VecEpilogue::None => {}
        VecEpilogue::Add => spec.flag("ADD"),
        VecEpilogue::Id => {
            spec.flag("ID");
            spec.var("IDS", "2");
        }
        VecEpilogue::Glu { expr } => {
            spec.flag("GLU");
            spec.var("EXPR", expr);
            spec.activations = true;
            return 2;
        }
        VecEpilogue::IdGlu { expr } => {
            spec.flags_if(&[(true, "ID"), (true, "GLU")]);
            spec.var("IDS", "3");
            spec.var("EXPR", expr);
            spec.activations = true;
            return 2;
        }
        VecEpilogue::Qkv => spec.flag("QKV"),
        VecEpilogue::QkvRope { neox, freq_factors } => {
            spec.flags_if(&[(true, "QKV"), (true, "ROPE")]);
            spec.rope = true;
            spec.flags_if(&[(neox, "NEOX"), (freq_factors, "FREQ_FACTORS")]);
            let s = VecSlots::new(epilogue, norm);
            spec.flags_if(&[(key.dtypes.get(s.s) == Some(&DType::I64), "IDX_I64")]);
            let cache = key.dtypes.get(s.d).copied().unwrap_or(DType::F32);
            spec.var("KT", wgsl_elem(cache).unwrap_or("f32"));
            spec.var("P", s.p);
            spec.var("FF", s.ff);
            spec.var("S", s.s);
        }
    }
    1
}

/// The `quant_unit.wgsl` flags of a weight dtype: its decoder and the helpers it uses.
fn unit_flags(dtype: DType, spec: &mut Spec) {
    spec.flag(unit_flag(dtype));
    spec.flags_if(&[
        (dtype.is_quantized(), "U_BLOCKS"),
        (matches!(dtype, DType::Q4_K | DType::Q5_K), "U_KSCALES"),
        (
            matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1),
            "U_NIBBLES",
        ),
        // Integer part decoders (`partq`), which the float ones are built from.
        (int8_activations(dtype), "U_INTQ"),
    ]);
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
