//! K-quants: `Q2_K`, `Q3_K`, `Q4_K`, `Q5_K`, `Q6_K`, `Q8_K` (256-value super-blocks whose
//! 16- or 32-value groups carry their own quantized scale).
//!
//! Layouts from `ggml-common.h` (`block_q2_K` …). Decoding follows `gguf.quants` operation for
//! operation (`(d * scale) * q - dmin * min`), so it is bit-exact. Encoding follows ggml's
//! `quantize_row_q*_K_ref` in `ggml-quants.c` (no importance matrix): a per-group scale search
//! ([`super::kquants_search`]), 4/6/8-bit quantization of the group scales, then a final pass that
//! re-picks every code against the scales as actually stored.

use super::kquants_search::{
    make_q3_quants, make_qkx2_quants, make_qx_quants, Sweep, GROUP_MAX_EPS,
};
use super::{f16_at, nearest_int, put_f16, signed_max, via_f16};

const QK: usize = 256;

// ---------------------------------------------------------------------------------------------
// Decoding

pub(super) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(84).zip(dst.chunks_exact_mut(QK)) {
        let (scales, qs) = (&b[..16], &b[16..80]);
        let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
        for (g, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(scales[g] & 0xf);
            let ml = dmin * f32::from(scales[g] >> 4);
            // Group g: values 16g.. take bits 2*shift of bytes 32*half + l.
            let (half, shift) = (g / 8, (g / 2) % 4);
            for (k, v) in ys.iter_mut().enumerate() {
                let q = (qs[32 * half + 16 * (g % 2) + k] >> (2 * shift)) & 3;
                *v = dl * f32::from(q) - ml;
            }
        }
    }
}

/// The sixteen 6-bit `Q3_K` group scales (minus their offset 32): low nibbles in bytes 0..8 (`j`
/// and `j + 8` share byte `j % 8`), high two bits in bytes 8..12.
fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let lo = (s[j % 8] >> (4 * (j / 8))) & 0xf;
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (lo | hi << 4) as i8 - 32;
    }
    out
}

pub(super) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(110).zip(dst.chunks_exact_mut(QK)) {
        let (hmask, qs) = (&b[..32], &b[32..96]);
        let scales = q3_k_scales(&b[96..108]);
        let d = f16_at(b, 108);
        for (g, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(scales[g]);
            let (half, shift) = (g / 8, (g / 2) % 4);
            for (k, v) in ys.iter_mut().enumerate() {
                let l = 16 * (g % 2) + k;
                let low = ((qs[32 * half + l] >> (2 * shift)) & 3) as i8;
                // A clear hmask bit means "subtract 4"; value i uses bit i / 32 of byte i % 32.
                let high = (hmask[l] >> (g / 2)) & 1;
                let q = low - if high == 0 { 4 } else { 0 };
                *v = dl * f32::from(q);
            }
        }
    }
}

/// The 6-bit scale and min of group `j` (0..8) of a `Q4_K`/`Q5_K` block (`get_scale_min_k4`).
#[inline]
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

pub(super) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(144).zip(dst.chunks_exact_mut(QK)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (scales, qs) = (&b[4..16], &b[16..144]);
        for (g, ys) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(g, scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            let bytes = &qs[32 * (g / 2)..32 * (g / 2) + 32];
            for (v, &q) in ys.iter_mut().zip(bytes) {
                *v = dl * f32::from((q >> (4 * (g % 2))) & 0xf) - ml;
            }
        }
    }
}

pub(super) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(176).zip(dst.chunks_exact_mut(QK)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
        for (g, ys) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(g, scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            let bytes = &qs[32 * (g / 2)..32 * (g / 2) + 32];
            for (l, (v, &q)) in ys.iter_mut().zip(bytes).enumerate() {
                let q = ((q >> (4 * (g % 2))) & 0xf) | ((qh[l] >> g) & 1) << 4;
                *v = dl * f32::from(q) - ml;
            }
        }
    }
}

pub(super) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(210).zip(dst.chunks_exact_mut(QK)) {
        let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for (g, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(scales[g] as i8);
            // Value i = 128 * half + r: low nibble from ql[64 * half + r % 64] (high nibble when
            // r >= 64), top two bits from qh[32 * half + r % 32] at bit 2 * (r / 32).
            let half = g / 8;
            for (k, v) in ys.iter_mut().enumerate() {
                let r = 16 * (g % 8) + k;
                let lo = (ql[64 * half + r % 64] >> (4 * (r / 64))) & 0xf;
                let hi = (qh[32 * half + r % 32] >> (2 * (r / 32))) & 3;
                *v = dl * f32::from((lo | hi << 4) as i8 - 32);
            }
        }
    }
}

pub(super) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(292).zip(dst.chunks_exact_mut(QK)) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (v, &q) in y.iter_mut().zip(&b[4..260]) {
            *v = d * f32::from(q as i8);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Packs 2-bit codes: byte `32 * half + l` holds values `128 * half + l + 32 * k` at bit `2k`.
fn pack_2bit(codes: &[u8; QK], qs: &mut [u8]) {
    for (i, q) in qs[..64].iter_mut().enumerate() {
        let base = 128 * (i / 32) + i % 32;
        *q = (0..4).fold(0u8, |acc, k| acc | (codes[base + 32 * k] & 3) << (2 * k));
    }
}

/// Re-picks codes `clamp(round((x + m) / d), 0, top)` for each group against its stored scale,
/// skipping groups whose scale is zero (their codes from the search stay).
fn requantize(
    x: &[f32],
    codes: &mut [u8],
    group: usize,
    top: i32,
    dm: impl Fn(usize) -> (f32, f32),
) {
    for (g, (xs, cs)) in x
        .chunks_exact(group)
        .zip(codes.chunks_exact_mut(group))
        .enumerate()
    {
        let (d, m) = dm(g);
        if d == 0.0 {
            continue;
        }
        for (c, &v) in cs.iter_mut().zip(xs) {
            *c = nearest_int((v + m) / d).clamp(0, top) as u8;
        }
    }
}

/// Quantizes positive group values to `0..=top` against their maximum; returns the codes and the
/// step `max / top` (0 when every value is 0).
fn quantize_scales<const N: usize>(v: &[f32; N], top: f32) -> ([u8; N], f32) {
    let max = v.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
    let mut out = [0u8; N];
    if max > 0.0 {
        let inv = top / max;
        for (o, &s) in out.iter_mut().zip(v) {
            *o = nearest_int(inv * s).clamp(0, top as i32) as u8;
        }
        (out, max / top)
    } else {
        (out, 0.0)
    }
}

pub(super) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    let sweep = Sweep {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    let mut codes = [0u8; QK];
    let mut aux = [0u8; 16];
    let mut weights = [0f32; 16];
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(84)) {
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        for (g, xs) in x.chunks_exact(16).enumerate() {
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let cs = &mut codes[16 * g..16 * g + 16];
            (scales[g], mins[g]) = make_qkx2_quants(xs, &weights, 3, &sweep, cs, &mut aux);
        }
        let (ls, d) = quantize_scales(&scales, 15.0);
        let (lm, dmin) = quantize_scales(&mins, 15.0);
        for g in 0..16 {
            b[g] = ls[g] | lm[g] << 4;
        }
        put_f16(b, 80, d);
        put_f16(b, 82, dmin);
        let (d, dmin) = (via_f16(d), via_f16(dmin));
        requantize(x, &mut codes, 16, 3, |g| {
            (d * f32::from(ls[g]), dmin * f32::from(lm[g]))
        });
        pack_2bit(&codes, &mut b[16..80]);
    }
}

pub(super) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    let mut signed = [0i8; QK];
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(110)) {
        let mut scales = [0f32; 16];
        for (g, xs) in x.chunks_exact(16).enumerate() {
            scales[g] = make_q3_quants(xs, 4, &mut signed[16 * g..16 * g + 16]);
        }
        let max_scale = signed_max(&scales);
        b.fill(0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                let l = (nearest_int(iscale * s).clamp(-32, 31) + 32) as u8;
                b[96 + j % 8] |= (l & 0xf) << (4 * (j / 8));
                b[96 + 8 + j % 4] |= (l >> 4) << (2 * (j / 4));
            }
            put_f16(b, 108, 1.0 / iscale);
        }
        let d = f16_at(b, 108);
        let stored = q3_k_scales(&b[96..108]);
        let mut codes = [0u8; QK];
        for (c, &s) in codes.iter_mut().zip(&signed) {
            *c = s as u8;
        }
        // Codes are l + 4 for l in -4..4; requantize works on x + 4d so the offset comes out.
        for (g, (xs, cs)) in x
            .chunks_exact(16)
            .zip(codes.chunks_exact_mut(16))
            .enumerate()
        {
            let dl = d * f32::from(stored[g]);
            if dl == 0.0 {
                continue;
            }
            for (c, &v) in cs.iter_mut().zip(xs) {
                *c = (nearest_int(v / dl).clamp(-4, 3) + 4) as u8;
            }
        }
        // Bit 2 of value i goes to bit i / 32 of hmask[i % 32]; the low two bits to qs.
        for (i, c) in codes.iter_mut().enumerate() {
            if *c > 3 {
                b[i % 32] |= 1 << (i / 32);
                *c -= 4;
            }
        }
        pack_2bit(&codes, &mut b[32..96]);
    }
}

/// Packs the eight 6-bit scales and mins of `Q4_K`/`Q5_K` (inverse of [`scale_min_k4`]).
fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8], s: &mut [u8]) {
    for j in 0..4 {
        s[j] = ls[j] | (ls[j + 4] >> 4) << 6;
        s[j + 4] = lm[j] | (lm[j + 4] >> 4) << 6;
        s[j + 8] = (ls[j + 4] & 0xf) | (lm[j + 4] & 0xf) << 4;
    }
}

/// The shared first half of `Q4_K`/`Q5_K`: per-group scale search with weights
/// `sqrt(mean(x²)) + |x|`, 6-bit scales and mins, f16 super-scales, final codes in `0..=nmax`.
fn quantize_k4_like(x: &[f32], nmax: i32, sweep: &Sweep, codes: &mut [u8; QK], b: &mut [u8]) {
    let mut aux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for (g, xs) in x.chunks_exact(32).enumerate() {
        let sum_x2: f32 = xs.iter().fold(0.0, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let cs = &mut codes[32 * g..32 * g + 32];
        (scales[g], mins[g]) = make_qkx2_quants(xs, &weights, nmax, sweep, cs, &mut aux);
    }
    let (ls, d) = quantize_scales(&scales, 63.0);
    let (lm, dmin) = quantize_scales(&mins, 63.0);
    pack_scale_min_k4(&ls, &lm, &mut b[4..16]);
    put_f16(b, 0, d);
    put_f16(b, 2, dmin);
    let (d, dmin) = (via_f16(d), via_f16(dmin));
    requantize(x, codes, 32, nmax, |g| {
        (d * f32::from(ls[g]), dmin * f32::from(lm[g]))
    });
}

pub(super) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    let sweep = Sweep {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let mut codes = [0u8; QK];
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(144)) {
        quantize_k4_like(x, 15, &sweep, &mut codes, b);
        // Byte 32c + l: value 64c + l in the low nibble, value 64c + 32 + l in the high one.
        for (i, q) in b[16..144].iter_mut().enumerate() {
            let base = 64 * (i / 32) + i % 32;
            *q = codes[base] | codes[base + 32] << 4;
        }
    }
}

pub(super) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    let sweep = Sweep {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let mut codes = [0u8; QK];
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(176)) {
        quantize_k4_like(x, 31, &sweep, &mut codes, b);
        b[16..48].fill(0);
        for (i, c) in codes.iter().enumerate() {
            // Value i: bit 4 to bit i / 32 of qh[i % 32], low nibble as in Q4_K.
            b[16 + i % 32] |= (c >> 4) << (i / 32);
        }
        for (i, q) in b[48..176].iter_mut().enumerate() {
            let base = 64 * (i / 32) + i % 32;
            *q = (codes[base] & 0xf) | (codes[base + 32] & 0xf) << 4;
        }
    }
}

pub(super) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    let mut signed = [0i8; QK];
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(210)) {
        let mut scales = [0f32; 16];
        for (g, xs) in x.chunks_exact(16).enumerate() {
            scales[g] = make_qx_quants(xs, 32, &mut signed[16 * g..16 * g + 16]);
        }
        let max_scale = signed_max(&scales);
        b.fill(0);
        if max_scale.abs() < GROUP_MAX_EPS {
            continue;
        }
        let iscale = -128.0 / max_scale;
        put_f16(b, 208, 1.0 / iscale);
        for (g, &s) in scales.iter().enumerate() {
            b[192 + g] = nearest_int(iscale * s).clamp(-128, 127) as i8 as u8;
        }
        let d = f16_at(b, 208);
        let mut codes = [0u8; QK];
        for (c, &s) in codes.iter_mut().zip(&signed) {
            *c = s as u8;
        }
        for (g, (xs, cs)) in x
            .chunks_exact(16)
            .zip(codes.chunks_exact_mut(16))
            .enumerate()
        {
            let dl = d * f32::from(b[192 + g] as i8);
            if dl == 0.0 {
                continue;
            }
            for (c, &v) in cs.iter_mut().zip(xs) {
                *c = (nearest_int(v / dl).clamp(-32, 31) + 32) as u8;
            }
        }
        // Inverse of the layout in dequantize_q6_k.
        for (i, &c) in codes.iter().enumerate() {
            let (half, r) = (i / 128, i % 128);
            b[64 * half + r % 64] |= (c & 0xf) << (4 * (r / 64));
            b[128 + 32 * half + r % 32] |= (c >> 4) << (2 * (r / 32));
        }
    }
}

pub(super) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(292)) {
        b.fill(0);
        let max = signed_max(x);
        if max == 0.0 {
            continue;
        }
        // -127 (not -128) so the largest value maps to -127 and codes stay symmetric, as ggml.
        let iscale = -127.0 / max;
        for (q, &v) in b[4..260].iter_mut().zip(x) {
            *q = nearest_int(iscale * v).clamp(-128, 127) as i8 as u8;
        }
        for g in 0..16 {
            let sum: i16 = b[4 + 16 * g..20 + 16 * g]
                .iter()
                .map(|&q| i16::from(q as i8))
                .sum();
            b[260 + 2 * g..262 + 2 * g].copy_from_slice(&sum.to_le_bytes());
        }
        b[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
