//! The IQ formats: codebook (`IQ1_S`, `IQ1_M`, `IQ2_XXS`, `IQ2_XS`, `IQ2_S`, `IQ3_XXS`, `IQ3_S`)
//! and non-linear 4-bit (`IQ4_NL`, `IQ4_XS`).
//!
//! Layouts from `ggml-common.h` (`block_iq2_xxs` …); decoding follows `gguf.quants` operation for
//! operation, e.g. `((d * (0.5 + s)) * 0.25) * grid * sign`, so it is bit-exact. The codebooks are
//! in [`super::iq_grids`]. Only the IQ4 formats can be encoded (ggml's `quantize_row_iq4_nl_impl`
//! without an importance matrix); the codebook formats need an importance matrix and search tables.

use super::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::kquants_search::{best_index, GROUP_MAX_EPS};
use super::{f16_at, nearest_int, put_f16, signed_max};

const QK_K: usize = 256;

/// `ksigns_iq2xs`: the 7 stored sign bits of 8 values, completed with an even-parity eighth bit.
static KSIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u32).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
};

/// `kvalues_iq4nl`: the 16 non-uniform levels of `IQ4_NL` and `IQ4_XS`.
const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `±scale * grid[i]`, negated where bit `i` of `signs` is set, for 8 values.
#[inline]
fn put_signed(y: &mut [f32], scale: f32, grid: &[u8; 8], signs: u8) {
    for (i, (v, &g)) in y.iter_mut().zip(grid).enumerate() {
        let a = scale * f32::from(g);
        *v = if signs >> i & 1 == 1 { -a } else { a };
    }
}

/// `d * (0.5 + s) * k`, the sub-block scale of the IQ2/IQ3_XXS formats.
#[inline]
fn half_step_scale(d: f32, s: u32, k: f32) -> f32 {
    d * (0.5 + s as f32) * k
}

#[inline]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

pub(super) fn dequantize_iq2_xxs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(66).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        // Each 32 values: a u32 of 4 grid indices, then a u32 of 4 x 7 sign bits and a scale.
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            let (grid_idx, aux) = (&b[2 + 8 * ib..6 + 8 * ib], u32_at(b, 6 + 8 * ib));
            let db = half_step_scale(d, aux >> 28, 0.25);
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                put_signed(y8, db, &IQ2XXS_GRID[usize::from(grid_idx[l])], signs);
            }
        }
    }
}

pub(super) fn dequantize_iq2_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(74).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        // 32 u16: 9-bit grid index and 7 sign bits; then one 4-bit scale per 16 values.
        for (k, y8) in y.chunks_exact_mut(8).enumerate() {
            let q = u16_at(b, 2 + 2 * k);
            let s = (b[66 + k / 4] >> (4 * ((k / 2) % 2))) & 0xf;
            let db = half_step_scale(d, u32::from(s), 0.25);
            let signs = KSIGNS[usize::from(q >> 9)];
            put_signed(y8, db, &IQ2XS_GRID[usize::from(q & 511)], signs);
        }
    }
}

pub(super) fn dequantize_iq2_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(82).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
        for (k, y8) in y.chunks_exact_mut(8).enumerate() {
            let hi = (qh[k / 4] >> (2 * (k % 4))) & 3;
            let idx = usize::from(qs[k]) | usize::from(hi) << 8;
            let s = (scales[k / 4] >> (4 * ((k / 2) % 2))) & 0xf;
            let db = half_step_scale(d, u32::from(s), 0.25);
            put_signed(y8, db, &IQ2S_GRID[idx], signs[k]);
        }
    }
}

/// Four values `scale * grid[i]` (IQ3 grids have 4 entries per row), signed by 4 bits of `signs`.
#[inline]
fn put_signed4(y: &mut [f32], scale: f32, grid: &[u8; 4], signs: u8) {
    for (i, (v, &g)) in y.iter_mut().zip(grid).enumerate() {
        let a = scale * f32::from(g);
        *v = if signs >> i & 1 == 1 { -a } else { a };
    }
}

pub(super) fn dequantize_iq3_xxs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(98).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let qs = &b[2..66];
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(b, 66 + 4 * ib);
            let db = half_step_scale(d, aux >> 28, 0.5);
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                let (g0, g1) = (qs[8 * ib + 2 * l], qs[8 * ib + 2 * l + 1]);
                put_signed4(&mut y8[..4], db, &IQ3XXS_GRID[usize::from(g0)], signs);
                put_signed4(&mut y8[4..], db, &IQ3XXS_GRID[usize::from(g1)], signs >> 4);
            }
        }
    }
}

pub(super) fn dequantize_iq3_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(110).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            let s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xf;
            let db = d * f32::from(1 + 2 * s);
            for (k, y4) in ys.chunks_exact_mut(4).enumerate() {
                let e = 8 * ib + k;
                let idx = usize::from(qs[e]) | usize::from((qh[e / 8] >> (e % 8)) & 1) << 8;
                let sign = signs[e / 2] >> (4 * (e % 2));
                put_signed4(y4, db, &IQ3S_GRID[idx], sign);
            }
        }
    }
}

/// `IQ1_S`/`IQ1_M` values: `dl * (grid + delta)` with grid entries in {-1, 0, 1}.
#[inline]
fn put_iq1(y: &mut [f32], dl: f32, grid: &[i8; 8], delta: f32) {
    for (v, &g) in y.iter_mut().zip(grid) {
        *v = dl * (f32::from(g) + delta);
    }
}

const IQ1_DELTA: f32 = 0.125;

pub(super) fn dequantize_iq1_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(50).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let qs = &b[2..34];
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            // Per 32 values, a u16: 4 x 3 high index bits, a 3-bit scale, the delta sign.
            let qh = u16_at(b, 34 + 2 * ib);
            let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
            let delta = if qh & 0x8000 == 0 {
                IQ1_DELTA
            } else {
                -IQ1_DELTA
            };
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let idx = usize::from(qs[4 * ib + l]) | usize::from((qh >> (3 * l)) & 7) << 8;
                put_iq1(y8, dl, &IQ1S_GRID[idx], delta);
            }
        }
    }
}

pub(super) fn dequantize_iq1_m(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(56).zip(dst.chunks_exact_mut(QK_K)) {
        let (qs, qh) = (&b[..32], &b[32..48]);
        let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
        // The f16 super-scale is split over the top nibbles of the four scale words.
        let d_bits = (sc[0] >> 12) | (sc[1] >> 8) & 0x00f0 | (sc[2] >> 4) & 0x0f00 | sc[3] & 0xf000;
        let d = half::f16::from_bits(d_bits).to_f32();
        for (k, y8) in y.chunks_exact_mut(8).enumerate() {
            // Scale j (3 bits, one per 16 values) is bits 3*(j%4).. of word j/4.
            let j = k / 2;
            let s = (sc[j / 4] >> (3 * (j % 4))) & 7;
            let dl = d * f32::from(2 * s + 1);
            let h = qh[k / 2] >> (4 * (k % 2));
            let idx = usize::from(qs[k]) | usize::from(h & 7) << 8;
            let delta = if h & 8 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
            put_iq1(y8, dl, &IQ1S_GRID[idx], delta);
        }
    }
}

/// 32 values from 16 bytes of `IQ4` codes: value `j` in the low nibble of byte `j`, value
/// `j + 16` in its high nibble.
#[inline]
fn put_iq4(y: &mut [f32], dl: f32, qs: &[u8]) {
    for (j, &q) in qs[..16].iter().enumerate() {
        y[j] = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0xf)]);
        y[j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
}

pub(super) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(32)) {
        put_iq4(y, f16_at(b, 0), &b[2..]);
    }
}

/// The 6-bit scale of sub-block `ib` of an `IQ4_XS` block, minus its offset 32.
#[inline]
fn iq4_xs_scale(b: &[u8], ib: usize) -> i8 {
    let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
    let hi = ((u16_at(b, 2) >> (2 * ib)) & 3) as u8;
    (lo | hi << 4) as i8 - 32
}

pub(super) fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(136).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * f32::from(iq4_xs_scale(b, ib));
            put_iq4(ys, dl, &b[8 + 16 * ib..]);
        }
    }
}

/// How many scale candidates on each side of `max / -127` the IQ4 search tries (`ntry` in ggml).
const IQ4_NTRY: i32 = 7;

/// Best scale for one 32-value group with codebook [`KVALUES_IQ4NL`] and weights `x²`: the
/// least-squares scale for the codes from `max / -127`, then for `2 * IQ4_NTRY` nearby starting
/// scales, keeping the one that explains most weighted energy. 0 for an all-zero group.
fn iq4_group_scale(x: &[f32]) -> f32 {
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(KVALUES_IQ4NL[0]);
    let fit = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = f32::from(KVALUES_IQ4NL[usize::from(best_index(&KVALUES_IQ4NL, id * v))]);
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let (sumqx, sumq2) = fit(1.0 / (-max / v0));
    let mut d = sumqx / sumq2;
    let mut best = d * sumqx;
    for itry in -IQ4_NTRY..=IQ4_NTRY {
        let (sumqx, sumq2) = fit((itry as f32 + v0) / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Codes for `x` against step `d`, packed as in [`put_iq4`].
fn pack_iq4(x: &[f32], d: f32, qs: &mut [u8]) {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for j in 0..16 {
        let lo = best_index(&KVALUES_IQ4NL, id * x[j]);
        let hi = best_index(&KVALUES_IQ4NL, id * x[j + 16]);
        qs[j] = lo | hi << 4;
    }
}

pub(super) fn quantize_iq4_nl(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(18)) {
        let d = iq4_group_scale(x);
        put_f16(b, 0, d);
        pack_iq4(x, d, &mut b[2..]);
    }
}

/// `IQ4_XS`: eight `IQ4_NL` groups whose scales are quantized to 6 bits against `-max / 32`.
pub(super) fn quantize_iq4_xs(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(136)) {
        let mut scales = [0f32; 8];
        for (s, xs) in scales.iter_mut().zip(x.chunks_exact(32)) {
            *s = iq4_group_scale(xs);
        }
        let d = -signed_max(&scales) / 32.0;
        put_f16(b, 0, d);
        b[2..8].fill(0);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        for (ib, (xs, &s)) in x.chunks_exact(32).zip(&scales).enumerate() {
            let l = nearest_int(id * s).clamp(-32, 31);
            // ggml codes against the unrounded `d`; the stored scale is `f16(d) * l`.
            pack_iq4(xs, d * l as f32, &mut b[8 + 16 * ib..24 + 16 * ib]);
            let l = (l + 32) as u8;
            b[4 + ib / 2] |= (l & 0xf) << (4 * (ib % 2));
            scales_h |= u16::from(l >> 4) << (2 * ib);
        }
        b[2..4].copy_from_slice(&scales_h.to_le_bytes());
    }
}
