//! The original 32-value block formats: `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q8_1`.
//!
//! Layouts from `ggml-common.h` (`block_q4_0` …). Quantizers reproduce `gguf.quants` bit for bit
//! (which in turn matches `quantize_row_q*_ref` in `ggml-quants.c`): scales are computed in f32 and
//! only stored as f16, the 4/5-bit codes truncate `x / d + offset + 0.5`, and `Q8_0` rounds half
//! away from zero. `Q8_1` (absent from `gguf.quants`) follows `quantize_row_q8_1_ref`.
//!
//! In every block, value `j < 16` lives in the low nibble of byte `j` and value `j + 16` in its high
//! nibble; `Q5_*` keep the fifth bit of value `j` in bit `j` of the little-endian `u32` `qh`.

use super::{f16_at, put_f16, signed_max};

const QK: usize = 32;

pub(super) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for (j, &q) in b[2..18].iter().enumerate() {
            y[j] = d * f32::from((q & 0xf) as i8 - 8);
            y[j + 16] = d * f32::from((q >> 4) as i8 - 8);
        }
    }
}

pub(super) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(20).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for (j, &q) in b[4..20].iter().enumerate() {
            y[j] = d * f32::from(q & 0xf) + m;
            y[j + 16] = d * f32::from(q >> 4) + m;
        }
    }
}

/// The 5-bit code of value `j` (0..32): a nibble of `qs` plus bit `j` of `qh`.
#[inline]
fn q5(qs: &[u8], qh: u32, j: usize) -> u8 {
    let lo = if j < 16 { qs[j] & 0xf } else { qs[j - 16] >> 4 };
    lo | (((qh >> j) & 1) as u8) << 4
}

pub(super) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(22).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for (j, v) in y.iter_mut().enumerate() {
            *v = d * f32::from(q5(&b[6..], qh, j) as i8 - 16);
        }
    }
}

pub(super) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(24).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for (j, v) in y.iter_mut().enumerate() {
            *v = d * f32::from(q5(&b[8..], qh, j)) + m;
        }
    }
}

pub(super) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(34).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for (v, &q) in y.iter_mut().zip(&b[2..]) {
            *v = f32::from(q as i8) * d;
        }
    }
}

/// `Q8_1` also stores `s = d * Σq` (bytes 2..4) for dot products; decoding needs only `d`.
pub(super) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for (v, &q) in y.iter_mut().zip(&b[4..]) {
            *v = d * f32::from(q as i8);
        }
    }
}

/// `1 / d`, or 0 for an all-zero block.
#[inline]
fn inverse(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// Symmetric 4/5-bit: `d = x[argmax |x|] / -half`, code `trunc(x / d + half + 0.5)`, capped at `2 * half - 1`.
fn quantize_symmetric(x: &[f32], half: f32) -> (f32, [u8; QK]) {
    let d = signed_max(x) / -half;
    let id = inverse(d);
    let top = (2.0 * half - 1.0) as u8;
    let mut q = [0u8; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        // `as u8` saturates; values are in 0..=2*half+0.5 for finite input.
        *q = ((v * id + (half + 0.5)).trunc() as u8).min(top);
    }
    (d, q)
}

/// Asymmetric 4/5-bit: `d = (max - min) / levels`, code `trunc((x - min) / d + 0.5)`.
fn quantize_min_max(x: &[f32], levels: f32) -> (f32, f32, [u8; QK]) {
    let (mut min, mut max) = (x[0], x[0]);
    for &v in &x[1..] {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / levels;
    let id = inverse(d);
    let mut q = [0u8; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (((v - min) * id + 0.5).trunc() as u8).min(levels as u8);
    }
    (d, min, q)
}

fn pack_nibbles(q: &[u8; QK], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = (q[j] & 0xf) | (q[j + 16] << 4);
    }
}

fn pack_high_bits(q: &[u8; QK]) -> [u8; 4] {
    let mut qh = 0u32;
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from(v >> 4) << j;
    }
    qh.to_le_bytes()
}

pub(super) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(18)) {
        let (d, q) = quantize_symmetric(x, 8.0);
        put_f16(b, 0, d);
        pack_nibbles(&q, &mut b[2..]);
    }
}

pub(super) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(20)) {
        let (d, m, q) = quantize_min_max(x, 15.0);
        put_f16(b, 0, d);
        put_f16(b, 2, m);
        pack_nibbles(&q, &mut b[4..]);
    }
}

pub(super) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(22)) {
        let (d, q) = quantize_symmetric(x, 16.0);
        put_f16(b, 0, d);
        b[2..6].copy_from_slice(&pack_high_bits(&q));
        pack_nibbles(&q, &mut b[6..]);
    }
}

pub(super) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(24)) {
        let (d, m, q) = quantize_min_max(x, 31.0);
        put_f16(b, 0, d);
        put_f16(b, 2, m);
        b[4..8].copy_from_slice(&pack_high_bits(&q));
        pack_nibbles(&q, &mut b[8..]);
    }
}

/// 8-bit codes `round(x / d)` (half away from zero) with `d = max|x| / 127`; returns `d`.
fn quantize_8bit(x: &[f32], qs: &mut [u8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8 as u8;
    }
    d
}

pub(super) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(34)) {
        let d = quantize_8bit(x, &mut b[2..]);
        put_f16(b, 0, d);
    }
}

pub(super) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(36)) {
        let d = quantize_8bit(x, &mut b[4..]);
        let sum: i32 = b[4..].iter().map(|&q| i32::from(q as i8)).sum();
        put_f16(b, 0, d);
        put_f16(b, 2, sum as f32 * d);
    }
}
