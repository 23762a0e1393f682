//! The kernel families added after the first library: shape gathers (`shape.wgsl`), upscale
//! (`upscale.wgsl`), reductions and sorting (`reduce.wgsl`), the expert matmul
//! (`mul_mat_id.wgsl`), sequence and convolution kernels (`seq.wgsl`), and the codebook
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
const SEQ: &str = include_str!("kernels/seq.wgsl");
const QUANT_GRID: &str = include_str!("kernels/quant_grid.wgsl");

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

/// The kernels of `seq.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SeqKind {
    SsmConv,
    Conv2d,
    Im2Col,
    SolveTri,
}

/// A kernel family of this module and its variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Shape(ShapeKind),
    Upscale(Interp),
    Reduce(ReduceKind),
    /// One weight row against one (slot, token) column per workgroup.
    MulMatId,
    Seq(SeqKind),
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
            Family::Seq(k) => {
                flags.push(match k {
                    SeqKind::SsmConv => "SSM_CONV",
                    SeqKind::Conv2d => "CONV_2D",
                    SeqKind::Im2Col => "IM2COL",
                    SeqKind::SolveTri => "SOLVE_TRI",
                });
                SEQ
            }
        }
    }
}

/// For a codebook format, its grid as `const GRID: array<u32, N>` (row bytes packed four to a
/// word, little-endian), an accessor, and the codebook decoders; empty for every other dtype.
pub(crate) fn grid_source(dtype: DType) -> String {
    let Some((width, bytes)) = iq_grid(dtype) else {
        return String::new();
    };
    let words: Vec<String> = bytes
        .chunks(4)
        .map(|c| {
            let w = c
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, &b)| w | u32::from(b) << (8 * i));
            format!("0x{w:08x}u")
        })
        .collect();
    let mut out = format!(
        "// {dtype} codebook: {} rows of {width} bytes.\nconst GRID = array<u32, {}>(\n",
        bytes.len() / width,
        words.len()
    );
    for line in words.chunks(8) {
        out.push_str("    ");
        out.push_str(&line.join(", "));
        out.push_str(",\n");
    }
    out.push_str(&format!(
        ");\n\n// Byte i of grid row r.\nfn grid_byte(r: u32, i: u32) -> u32 {{\n    \
         let b = r * {width}u + i;\n    return (GRID[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;\n}}\n\n"
    ));
    out.push_str(QUANT_GRID);
    out
}
