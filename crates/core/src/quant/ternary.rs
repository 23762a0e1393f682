//! Ternary formats `TQ1_0` and `TQ2_0` (values `d * {-1, 0, 1}`, 256 per block).
//!
//! Layouts from `ggml-common.h` (`block_tq1_0`, `block_tq2_0`); quantizers match `gguf.quants`
//! (`TQ1_0`, `TQ2_0`) bit for bit: `d = max|x|`, code `round(x / d)` half away from zero.
//!
//! `TQ1_0` packs five base-3 digits per byte as a fixed-point fraction: the byte holds
//! `ceil(n * 256 / 243)` for the base-3 number `n`, so multiplying by `3^k` (wrapping in `u8`)
//! brings digit `k` to the top, where `(b * 3) >> 8` reads it. `TQ2_0` stores 2-bit codes.

use super::{f16_at, put_f16};

const QK: usize = 256;
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// The ternary digit (-1, 0 or 1) brought to the top of `byte` by multiplying by `pow`.
#[inline]
fn trit(byte: u8, pow: u8) -> f32 {
    let q = byte.wrapping_mul(pow);
    f32::from(((u16::from(q) * 3) >> 8) as i8 - 1)
}

/// `(start, bytes, digits)` of the three `TQ1_0` regions: byte `j` of a region holds the values
/// `start + k * bytes + j` for `k` in `0..digits`.
const TQ1_REGIONS: [(usize, usize, usize); 3] = [(0, 32, 5), (160, 16, 5), (240, 4, 4)];

pub(super) fn dequantize_tq1_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(54).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 52);
        let mut byte = 0;
        for (start, bytes, digits) in TQ1_REGIONS {
            for j in 0..bytes {
                for (k, &pow) in POW3[..digits].iter().enumerate() {
                    y[start + k * bytes + j] = d * trit(b[byte + j], pow);
                }
            }
            byte += bytes;
        }
    }
}

pub(super) fn dequantize_tq2_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(66).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 64);
        for (j, &q) in b[..64].iter().enumerate() {
            let base = (j / 32) * 128 + j % 32;
            for k in 0..4 {
                y[base + 32 * k] = d * f32::from(((q >> (2 * k)) & 3) as i8 - 1);
            }
        }
    }
}

/// `d = max|x|` and the codes `round(x / d) + 1` in 0..=2.
fn ternary_codes(x: &[f32]) -> (f32, [u8; QK]) {
    let d = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut q = [0u8; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = ((v * id).round() as i8 + 1) as u8;
    }
    (d, q)
}

pub(super) fn quantize_tq1_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(54)) {
        let (d, q) = ternary_codes(x);
        let mut byte = 0;
        for (start, bytes, digits) in TQ1_REGIONS {
            for j in 0..bytes {
                // Most significant digit first: value k gets weight 3^(4 - k).
                let n: u16 = (0..digits)
                    .map(|k| u16::from(q[start + k * bytes + j]) * u16::from(POW3[4 - k]))
                    .sum();
                b[byte + j] = (n * 256).div_ceil(243) as u8;
            }
            byte += bytes;
        }
        put_f16(b, 52, d);
    }
}

pub(super) fn quantize_tq2_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(66)) {
        let (d, q) = ternary_codes(x);
        for (j, out) in b[..64].iter_mut().enumerate() {
            let base = (j / 32) * 128 + j % 32;
            *out = (0..4).fold(0u8, |acc, k| acc | q[base + 32 * k] << (2 * k));
        }
        put_f16(b, 64, d);
    }
}
