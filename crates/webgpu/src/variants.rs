//! The kernel families added after the first library: shape gathers (`shape.wgsl`), upscale
//! (`upscale.wgsl`), reductions and sorting (`reduce.wgsl`), the expert matmul
//! (`mul_mat_id.wgsl`), its router (`moe_router.wgsl`), routing (`moe_route.wgsl`) and
//! weighted sum (`moe_sum.wgsl`), sequence and convolution kernels (`seq.wgsl`), recurrent
//! scans (`scan.wgsl`), the draw from top-k candidates (`sample.wgsl`), and the codebook
//! decoders of the IQ formats (`quant_grid.wgsl`, with their grids emitted from
//! `wgllm_core::quant::iq_grid` at template time, never copied by hand).
//!
//! Each kind says which `#if` flags and `{{NAME}}` values its variant sets; `shaders::source`
//! calls [`Family::configure`] for the body.

use wgllm_core::quant::iq_grid;
use wgllm_core::DType;

const SHAPE: &str = include_str!("kernels/shape.wgsl");
const UPSCALE: &str = include_str!("kernels/upscale.wgsl");
const REDUCE: &str = include_str!("kernels/reduce.wgsl");
const MUL_MAT_ID: &str = include_str!("kernels/mul_mat_id.wgsl");
const MOE_ROUTE: &str = include_str!("kernels/moe_route.wgsl");
const MOE_SUM: &str = include_str!("kernels/moe_sum.wgsl");
const MOE_ROUTER: &str = include_str!("kernels/moe_router.wgsl");
const SEQ: &str = include_str!("kernels/seq.wgsl");
const SCAN: &str = include_str!("kernels/scan.wgsl");
const QUANT_GRID: &str = include_str!("kernels/quant_grid.wgsl");
const SAMPLE: &str = include_str!("kernels/sample.wgsl");

/// Words per codebook table (see [`grid_source`]).
const GRID_CHUNK: usize = 64;

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

/// A kernel family of this module and its variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Shape(ShapeKind),
    Upscale(Interp),
    Reduce(ReduceKind),
    /// One weight row against one (slot, token) column per workgroup.
    MulMatId,
    /// A mixture-of-experts product's (slot, token) columns bucketed by expert, one workgroup
    /// per bucket (`moe_route.wgsl`).
    MoeRoute,
    /// The weighted sum of a mixture of experts' outputs [plus a residual], an invocation per
    /// element (`moe_sum.wgsl`).
    MoeSum {
        residual: bool,
    },
    /// A mixture-of-experts router's softmax, top-k and weights, one workgroup per token
    /// (`moe_router.wgsl`), reducing through subgroup operations when `subgroups`.
    MoeRouter {
        subgroups: bool,
    },
    Seq(SeqKind),
    /// One row's draw from its candidates per workgroup.
    Sample,
}

impl Family {
    /// Sets the variant's flags and placeholders and returns the family's body.
    pub(crate) fn configure(
        self,
        flags: &mut Vec<&'static str>,
        vars: &mut Vec<(&'static str, String)>,
    ) -> &'static str {
        match self {
            Family::Shape(k) => {
                flags.push(match k {
                    ShapeKind::Repeat => "REPEAT",
                    ShapeKind::Pad { circular: false } => "PAD",
                    ShapeKind::Pad { circular: true } => "CIRCULAR",
                    ShapeKind::Diag => "DIAG",
                    ShapeKind::Tri => "TRI",
                    ShapeKind::AddId => "ADD_ID",
                });
                SHAPE
            }
            Family::Upscale(i) => {
                flags.push(match i {
                    Interp::Nearest => "NEAREST",
                    Interp::Bilinear => "BILINEAR",
                    Interp::Bicubic => "BICUBIC",
                });
                UPSCALE
            }
            Family::Reduce(k) => {
                let (flag, n) = match k {
                    ReduceKind::Sum => ("SUM", 1),
                    ReduceKind::SumRows => ("SUM_ROWS", 1),
                    ReduceKind::CumSum => ("CUMSUM", 1),
                    ReduceKind::ArgSort { n } => ("ARGSORT", n),
                };
                flags.push(flag);
                vars.push(("SORT_N", n.to_string()));
                REDUCE
            }
            Family::MulMatId => MUL_MAT_ID,
            Family::MoeRoute => MOE_ROUTE,
            Family::MoeSum { residual } => {
                if residual {
                    flags.push("RESIDUAL");
                }
                vars.push(("D", (2 + u32::from(residual)).to_string()));
                MOE_SUM
            }
            Family::MoeRouter { subgroups } => {
                if subgroups {
                    flags.push("SUBGROUP");
                }
                vars.push(("MAX_E", crate::ops::ROUTER_MAX_EXPERTS.to_string()));
                MOE_ROUTER
            }
            Family::Seq(k) => {
                let (flag, body) = match k {
                    SeqKind::SsmConv => ("SSM_CONV", SEQ),
                    SeqKind::Conv2d => ("CONV_2D", SEQ),
                    SeqKind::Im2Col => ("IM2COL", SEQ),
                    SeqKind::SolveTri => ("SOLVE_TRI", SEQ),
                    SeqKind::SsmScan => ("SSM_SCAN", SCAN),
                    SeqKind::GatedDeltaNet => ("GATED_DELTA_NET", SCAN),
                };
                flags.push(flag);
                body
            }
            Family::Sample => {
                vars.push(("MAX_K", crate::ops::SAMPLE_MAX_K.to_string()));
                SAMPLE
            }
        }
    }
}

/// For a codebook format, its grid in WGSL: `GRID_LEVELS`, the distinct values, and `GRID`, every
/// row as 16 bits of level indices (`16 / width` bits per value, lowest first, as ggml's packed
/// grids), two rows to a word; then an accessor and the codebook decoders. Empty for every other
/// dtype. Packed rows and chunks of [`GRID_CHUNK`] words keep each table small: lavapipe's
/// compiler spends time superlinear in the size of a dynamically indexed array (a 1024-word
/// table took 14 s to compile, sixteen 64-word ones under 3 s).
pub(crate) fn grid_source(dtype: DType) -> Result<String, String> {
    let Some((width, values)) = iq_grid(dtype) else {
        return Ok(String::new());
    };
    let mut levels: Vec<u8> = values.clone();
    levels.sort_by_key(|&v| v as i8);
    levels.dedup();
    let bits = 16 / width;
    if levels.len() > 1 << bits || values.len() % (2 * width) != 0 {
        return Err(format!("{dtype} grid does not pack into 16-bit rows"));
    }
    let index = |v: u8| levels.iter().position(|&l| l == v).unwrap_or(0) as u32;
    let rows: Vec<u32> = values
        .chunks(width)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold(0, |w, (i, &v)| w | index(v) << (bits * i))
        })
        .collect();
    let words: Vec<String> = rows
        .chunks(2)
        .map(|p| format!("0x{:08x}u", p[0] | p[1] << 16))
        .collect();
    let level_list: Vec<String> = levels.iter().map(|&l| format!("{l}u")).collect();
    let mut out = format!(
        "// {dtype} codebook: {} rows of {width} values.\n\
         var<private> GRID_LEVELS: array<u32, {n}> = array<u32, {n}>({});\n\n",
        rows.len(),
        level_list.join(", "),
        n = levels.len(),
    );
    let mut select = String::new();
    for (c, chunk) in words.chunks(GRID_CHUNK).enumerate() {
        out.push_str(&format!(
            "var<private> GRID{c}: array<u32, {m}> = array<u32, {m}>(\n",
            m = chunk.len()
        ));
        for line in chunk.chunks(8) {
            out.push_str("    ");
            out.push_str(&line.join(", "));
            out.push_str(",\n");
        }
        out.push_str(");\n");
        select.push_str(&format!(
            "        case {c}u: {{ return GRID{c}[w % {GRID_CHUNK}u]; }}\n"
        ));
    }
    out.push_str(&format!(
        "\nfn grid_word(w: u32) -> u32 {{\n    switch w / {GRID_CHUNK}u {{\n{select}        \
         default: {{ return 0u; }}\n    }}\n}}\n\n\
         // Value i of grid row r, as a byte.\nfn grid_byte(r: u32, i: u32) -> u32 {{\n    \
         let row = (grid_word(r >> 1u) >> ((r & 1u) * 16u)) & 0xffffu;\n    \
         return GRID_LEVELS[(row >> ({bits}u * i)) & {mask}u];\n}}\n\n",
        mask = (1u32 << bits) - 1
    ));
    out.push_str(QUANT_GRID);
    Ok(out)
}
