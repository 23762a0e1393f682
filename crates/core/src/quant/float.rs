//! Plain scalars: f32, f16, bf16, f64 and the signed integers, all little-endian.
//!
//! f16 follows IEEE 754 binary16 with round-to-nearest-even (numpy's `astype(np.float16)`); bf16
//! follows `ggml_compute_fp32_to_bf16` in `ggml-impl.h` (also `gguf.quants.BF16`): NaNs are made
//! quiet, everything else rounds to nearest even.

use crate::dtype::DType;
use crate::error::{Error, Result};

pub(super) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

pub(super) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

pub(super) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
    }
}

pub(super) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&half::f16::from_f32(*s).to_le_bytes());
    }
}

/// bf16 is the top half of an f32, so widening is a shift.
pub(super) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
    }
}

/// `ggml_compute_fp32_to_bf16`: a NaN keeps its sign and top mantissa bits and gets the quiet
/// bit; any other value rounds to nearest even (infinities stay, overflow gives infinity).
fn bf16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 0x0040) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((u64::from(bits) + u64::from(round)) >> 16) as u16
}

pub(super) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&bf16_bits(*s).to_le_bytes());
    }
}

/// f64 narrows with round-to-nearest-even; out-of-range values become infinities.
pub(super) fn dequantize_f64(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(s);
        *d = f64::from_le_bytes(b) as f32;
    }
}

pub(super) fn quantize_f64(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(8)) {
        d.copy_from_slice(&f64::from(*s).to_le_bytes());
    }
}

/// Sign-extends the `N`-byte little-endian integer in `s`.
#[inline]
fn read_int<const N: usize>(s: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b[..N].copy_from_slice(s);
    let shift = 64 - 8 * N as u32;
    (i64::from_le_bytes(b) << shift) >> shift
}

/// Integers convert to the nearest f32 (ties to even), as numpy's `astype(np.float32)` does.
pub(super) fn dequantize_int<const N: usize>(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(N)) {
        *d = read_int::<N>(s) as f32;
    }
}

/// Rounds to the nearest integer (ties to even, numpy's `rint`); a NaN or a value outside the
/// `N`-byte range is an error rather than a silent saturation.
pub(super) fn quantize_int<const N: usize>(
    dtype: DType,
    src: &[f32],
    dst: &mut [u8],
) -> Result<()> {
    let bits = 8 * N as u32;
    // -2^(bits-1) ..= 2^(bits-1) - 1; both bounds are exact in f64.
    let limit = 2f64.powi(bits as i32 - 1);
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(N)) {
        let r = f64::from(s.round_ties_even());
        if !(-limit..limit).contains(&r) {
            return Err(Error::Quant {
                dtype,
                what: format!("{s} does not fit a {bits}-bit integer"),
            });
        }
        d.copy_from_slice(&(r as i64).to_le_bytes()[..N]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nans() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80); // tie, even stays
        assert_eq!(bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82); // tie, odd goes up
        assert_eq!(bf16_bits(f32::from_bits(0x7f7f_ffff)), 0x7f80); // overflow to inf
        assert_eq!(bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0); // signalling NaN
        assert_eq!(bf16_bits(f32::NEG_INFINITY), 0xff80);
    }

    #[test]
    fn int_limits() {
        let mut b = [0u8; 1];
        assert!(quantize_int::<1>(DType::I8, &[127.4], &mut b).is_ok());
        assert_eq!(b, [127]);
        assert!(quantize_int::<1>(DType::I8, &[-128.5], &mut b).is_ok());
        assert_eq!(b, [0x80]);
        assert!(quantize_int::<1>(DType::I8, &[127.5], &mut b).is_err());
        assert!(quantize_int::<1>(DType::I8, &[f32::NAN], &mut b).is_err());
        let mut b = [0u8; 8];
        assert!(quantize_int::<8>(DType::I64, &[9.223372e18], &mut b).is_err()); // 2^63
        assert!(quantize_int::<8>(DType::I64, &[-9.223372e18], &mut b).is_ok());
        assert_eq!(read_int::<8>(&b), -9_223_372_036_854_775_808);
        assert_eq!(read_int::<2>(&[0xfe, 0xff]), -2);
    }
}
