//! Bit-exact conversion between f32 and every element format (GGUF block formats included).
//!
//! Reference: ggml's `ggml-common.h` (block layouts) and `ggml-quants.c`, and the `gguf` Python
//! package (`gguf/quants.py`), whose outputs `tests/quant_vectors.rs` compares against bit for bit.
//! Floating-point operations are done in the order `gguf/quants.py` does them (for example
//! `(d * scale) * q - m`, never fused), so dequantized values match to the last bit.
//!
//! One module per family: `float` (plain scalars), `legacy` (`Q4_0`..`Q8_1`), `kquants`
//! (`Q2_K`..`Q8_K`, scale search in `kquants_search`), `iquants` (the IQ codebook formats, with
//! tables in `iq_grids`), `ternary` (`TQ1_0`, `TQ2_0`) and `mxfp4`.
//!
//! Adding a format: write `dequantize_x(src, dst)` (and `quantize_x`) in its family module, walking
//! `chunks_exact` over blocks, then add the arms below; the `match`es have no catch-all, so the
//! compiler lists every place a new [`DType`] must be handled.

mod float;
mod iq_grids;
mod iquants;
mod kquants;
mod kquants_search;
mod legacy;
mod mxfp4;
mod ternary;

use crate::dtype::DType;
use crate::error::{Error, Result};

fn check_len(dtype: DType, n_values: usize, n_bytes: usize) -> Result<()> {
    let want = dtype
        .row_bytes(n_values as u64)
        .ok_or_else(|| Error::Quant {
            dtype,
            what: format!(
                "{n_values} values are not a whole number of {}-value blocks",
                dtype.block_size()
            ),
        })?;
    if want != n_bytes as u64 {
        return Err(Error::Quant {
            dtype,
            what: format!("{n_values} values need {want} bytes, buffer has {n_bytes}"),
        });
    }
    Ok(())
}

/// Decodes `src` (whole blocks of `dtype`) into `dst`, one f32 per value.
///
/// Errors when `src` is not exactly the encoding of `dst.len()` values.
pub fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_len(dtype, dst.len(), src.len())?;
    match dtype {
        DType::F32 => float::dequantize_f32(src, dst),
        DType::F16 => float::dequantize_f16(src, dst),
        DType::BF16 => float::dequantize_bf16(src, dst),
        DType::F64 => float::dequantize_f64(src, dst),
        DType::I8 => float::dequantize_int::<1>(src, dst),
        DType::I16 => float::dequantize_int::<2>(src, dst),
        DType::I32 => float::dequantize_int::<4>(src, dst),
        DType::I64 => float::dequantize_int::<8>(src, dst),
        DType::Q4_0 => legacy::dequantize_q4_0(src, dst),
        DType::Q4_1 => legacy::dequantize_q4_1(src, dst),
        DType::Q5_0 => legacy::dequantize_q5_0(src, dst),
        DType::Q5_1 => legacy::dequantize_q5_1(src, dst),
        DType::Q8_0 => legacy::dequantize_q8_0(src, dst),
        DType::Q8_1 => legacy::dequantize_q8_1(src, dst),
        DType::Q2_K => kquants::dequantize_q2_k(src, dst),
        DType::Q3_K => kquants::dequantize_q3_k(src, dst),
        DType::Q4_K => kquants::dequantize_q4_k(src, dst),
        DType::Q5_K => kquants::dequantize_q5_k(src, dst),
        DType::Q6_K => kquants::dequantize_q6_k(src, dst),
        DType::Q8_K => kquants::dequantize_q8_k(src, dst),
        DType::IQ1_S => iquants::dequantize_iq1_s(src, dst),
        DType::IQ1_M => iquants::dequantize_iq1_m(src, dst),
        DType::IQ2_XXS => iquants::dequantize_iq2_xxs(src, dst),
        DType::IQ2_XS => iquants::dequantize_iq2_xs(src, dst),
        DType::IQ2_S => iquants::dequantize_iq2_s(src, dst),
        DType::IQ3_XXS => iquants::dequantize_iq3_xxs(src, dst),
        DType::IQ3_S => iquants::dequantize_iq3_s(src, dst),
        DType::IQ4_NL => iquants::dequantize_iq4_nl(src, dst),
        DType::IQ4_XS => iquants::dequantize_iq4_xs(src, dst),
        DType::TQ1_0 => ternary::dequantize_tq1_0(src, dst),
        DType::TQ2_0 => ternary::dequantize_tq2_0(src, dst),
        DType::MXFP4 => mxfp4::dequantize_mxfp4(src, dst),
    }
    Ok(())
}

/// True when [`quantize`] can encode `dtype`.
pub fn can_quantize(dtype: DType) -> bool {
    match dtype {
        DType::F32
        | DType::F16
        | DType::BF16
        | DType::F64
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::Q4_0
        | DType::Q4_1
        | DType::Q5_0
        | DType::Q5_1
        | DType::Q8_0
        | DType::Q8_1
        | DType::Q2_K
        | DType::Q3_K
        | DType::Q4_K
        | DType::Q5_K
        | DType::Q6_K
        | DType::Q8_K
        | DType::IQ4_NL
        | DType::IQ4_XS
        | DType::TQ1_0
        | DType::TQ2_0
        | DType::MXFP4 => true,
        // These need an importance matrix and codebook search tables; not implemented.
        DType::IQ1_S
        | DType::IQ1_M
        | DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ3_XXS
        | DType::IQ3_S => false,
    }
}

/// Encodes `src` into whole blocks of `dtype` in `dst`.
///
/// Errors when `dst` is not exactly the size of `src.len()` encoded values, when `dtype` has no
/// quantizer ([`can_quantize`]), or when a value does not fit an integer `dtype`.
pub fn quantize(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    check_len(dtype, src.len(), dst.len())?;
    match dtype {
        DType::F32 => float::quantize_f32(src, dst),
        DType::F16 => float::quantize_f16(src, dst),
        DType::BF16 => float::quantize_bf16(src, dst),
        DType::F64 => float::quantize_f64(src, dst),
        DType::I8 => return float::quantize_int::<1>(dtype, src, dst),
        DType::I16 => return float::quantize_int::<2>(dtype, src, dst),
        DType::I32 => return float::quantize_int::<4>(dtype, src, dst),
        DType::I64 => return float::quantize_int::<8>(dtype, src, dst),
        DType::Q4_0 => legacy::quantize_q4_0(src, dst),
        DType::Q4_1 => legacy::quantize_q4_1(src, dst),
        DType::Q5_0 => legacy::quantize_q5_0(src, dst),
        DType::Q5_1 => legacy::quantize_q5_1(src, dst),
        DType::Q8_0 => legacy::quantize_q8_0(src, dst),
        DType::Q8_1 => legacy::quantize_q8_1(src, dst),
        DType::Q2_K => kquants::quantize_q2_k(src, dst),
        DType::Q3_K => kquants::quantize_q3_k(src, dst),
        DType::Q4_K => kquants::quantize_q4_k(src, dst),
        DType::Q5_K => kquants::quantize_q5_k(src, dst),
        DType::Q6_K => kquants::quantize_q6_k(src, dst),
        DType::Q8_K => kquants::quantize_q8_k(src, dst),
        DType::IQ4_NL => iquants::quantize_iq4_nl(src, dst),
        DType::IQ4_XS => iquants::quantize_iq4_xs(src, dst),
        DType::TQ1_0 => ternary::quantize_tq1_0(src, dst),
        DType::TQ2_0 => ternary::quantize_tq2_0(src, dst),
        DType::MXFP4 => mxfp4::quantize_mxfp4(src, dst),
        DType::IQ1_S
        | DType::IQ1_M
        | DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ3_XXS
        | DType::IQ3_S => {
            return Err(Error::Quant {
                dtype,
                what: "no quantizer for this type".into(),
            })
        }
    }
    Ok(())
}

/// The codebook of an IQ format as `(values per row, every row's values in order)`, for backends
/// that embed the tables in their kernels; the IQ1 grids' `-1`/`0`/`1` come as two's-complement
/// bytes. `None` for formats without a codebook.
pub fn iq_grid(dtype: DType) -> Option<(usize, Vec<u8>)> {
    use iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
    let grid = match dtype {
        DType::IQ2_XXS => (8, IQ2XXS_GRID.as_flattened().to_vec()),
        DType::IQ2_XS => (8, IQ2XS_GRID.as_flattened().to_vec()),
        DType::IQ2_S => (8, IQ2S_GRID.as_flattened().to_vec()),
        DType::IQ3_XXS => (4, IQ3XXS_GRID.as_flattened().to_vec()),
        DType::IQ3_S => (4, IQ3S_GRID.as_flattened().to_vec()),
        DType::IQ1_S | DType::IQ1_M => (
            8,
            IQ1S_GRID.as_flattened().iter().map(|&v| v as u8).collect(),
        ),
        _ => return None,
    };
    Some(grid)
}

/// The little-endian f16 at `b[i..i + 2]`, widened (exactly) to f32.
#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Stores `v` rounded to f16 (nearest, ties to even; numpy's `astype(np.float16)`) at `b[i..i + 2]`.
#[inline]
fn put_f16(b: &mut [u8], i: usize, v: f32) {
    b[i..i + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
}

/// `v` rounded to f16 and back: the value a stored f16 scale really has.
#[inline]
fn via_f16(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

/// ggml's `nearest_int`: round half to even (ggml adds 1.5 * 2^23 and reads the mantissa). Out of
/// range values saturate instead of asserting; every caller clamps the result.
#[inline]
fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// The first value of largest magnitude, sign included (numpy's `x[argmax(abs(x))]`, ggml's
/// `if (fabsf(v) > amax) { amax = fabsf(v); max = v; }`); `x[0]` when all are zero.
#[inline]
fn signed_max(x: &[f32]) -> f32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if v.abs() > x[best].abs() {
            best = i;
        }
    }
    x[best]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
        assert_eq!(nearest_int(f32::NAN), 0);
    }
}
