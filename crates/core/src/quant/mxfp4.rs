//! `MXFP4`: OCP microscaling FP4 (E2M1 values, one E8M0 exponent per 32 values).
//!
//! Spec: <https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf>;
//! layout `block_mxfp4` in `ggml-common.h`. Like ggml, the E2M1 values are stored doubled
//! (`kvalues_mxfp4`) and the scale halved (`ggml_e8m0_to_fp32_half`). The quantizer matches
//! `gguf.quants.MXFP4` bit for bit, including its `floor(log2(max|x|))` computed in f32.

const QK: usize = 32;

/// E2M1 values times two, indexed by the 4-bit code.
const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `2^(e - 127) / 2`, built from bits so that `e = 0` and `e = 1` give the exact subnormals.
#[inline]
fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(u32::from(e - 1) << 23)
    }
}

pub(super) fn dequantize_mxfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(17).zip(dst.chunks_exact_mut(QK)) {
        let d = e8m0_half(b[0]);
        for (j, &q) in b[1..].iter().enumerate() {
            y[j] = d * f32::from(KVALUES[usize::from(q & 0xf)]);
            y[j + 16] = d * f32::from(KVALUES[usize::from(q >> 4)]);
        }
    }
}

/// The shared exponent: `floor(log2(max|x|)) - 2 + 127`, 0 for an all-zero block. Like numpy's
/// float-to-`uint8` cast on x86, an out-of-range exponent wraps modulo 256 (only for
/// `max|x| < 2^-125`, where the format cannot represent the block anyway).
fn shared_exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
    } else {
        0
    }
}

/// The code whose value `d * KVALUES[code]` is nearest to `v`; the lowest code wins ties.
#[inline]
fn nearest_code(d: f32, v: f32) -> u8 {
    let mut best = 0;
    let mut best_err = f32::INFINITY;
    for (i, &k) in KVALUES.iter().enumerate() {
        let err = (d * f32::from(k) - v).abs();
        if err < best_err {
            best_err = err;
            best = i as u8;
        }
    }
    best
}

pub(super) fn quantize_mxfp4(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(17)) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let e = shared_exponent(amax);
        let d = e8m0_half(e);
        b[0] = e;
        for j in 0..16 {
            b[1 + j] = nearest_code(d, x[j]) | nearest_code(d, x[j + 16]) << 4;
        }
    }
}
