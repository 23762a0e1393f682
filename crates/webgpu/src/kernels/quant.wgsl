// Decoding of GGUF block-quantized values from `src0: array<u32>` (the raw block bytes).
// `blk` is the byte offset of a block within the binding, `j` the value's index in the block.
// Layouts and formulas follow ggml-common.h / ggml-quants.c (dequantize_row_*).

fn qb(b: u32) -> u32 {
    return (src0[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn qf16(b: u32) -> f32 {
    return unpack2x16float(qb(b) | (qb(b + 1u) << 8u)).x;
}

fn qi8(b: u32) -> f32 {
    return f32(bitcast<i32>(qb(b) << 24u) >> 24u);
}

// Nibble j of a 16-byte array at `b`: j < 16 the low nibble of byte j, else the high of j - 16.
fn nibble32(b: u32, j: u32) -> u32 {
    return (qb(b + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u;
}

// q4_0 { f16 d; u8 qs[16]; }
fn dq_q4_0(blk: u32, j: u32) -> f32 {
    return qf16(blk) * (f32(nibble32(blk + 2u, j)) - 8.0);
}

// q4_1 { f16 d; f16 m; u8 qs[16]; }
fn dq_q4_1(blk: u32, j: u32) -> f32 {
    return qf16(blk) * f32(nibble32(blk + 4u, j)) + qf16(blk + 2u);
}

// q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }: bit j of qh is the fifth bit of value j.
fn dq_q5_0(blk: u32, j: u32) -> f32 {
    let h = (qb(blk + 2u + (j >> 3u)) >> (j & 7u)) & 1u;
    return qf16(blk) * (f32(nibble32(blk + 6u, j) | (h << 4u)) - 16.0);
}

// q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; }
fn dq_q5_1(blk: u32, j: u32) -> f32 {
    let h = (qb(blk + 4u + (j >> 3u)) >> (j & 7u)) & 1u;
    return qf16(blk) * f32(nibble32(blk + 8u, j) | (h << 4u)) + qf16(blk + 2u);
}

// q8_0 { f16 d; i8 qs[32]; }
fn dq_q8_0(blk: u32, j: u32) -> f32 {
    return qf16(blk) * qi8(blk + 2u + j);
}

// q2_K { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }
fn dq_q2_K(blk: u32, j: u32) -> f32 {
    let n = j / 128u;
    let w = j % 128u;
    let jj = w / 32u;
    let l = w % 32u;
    let sc = qb(blk + 8u * n + 2u * jj + l / 16u);
    let q = (qb(blk + 16u + 32u * n + l) >> (2u * jj)) & 3u;
    return qf16(blk + 80u) * f32(sc & 15u) * f32(q) - qf16(blk + 82u) * f32(sc >> 4u);
}

// q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }: 16 six-bit scales, biased by 32.
fn dq_q3_K(blk: u32, j: u32) -> f32 {
    let n = j / 128u;
    let w = j % 128u;
    let jj = w / 32u;
    let l = w % 32u;
    let is = 8u * n + 2u * jj + l / 16u;
    let lo = (qb(blk + 96u + is % 8u) >> (4u * (is / 8u))) & 15u;
    let hi = (qb(blk + 104u + is % 4u) >> (2u * (is / 4u))) & 3u;
    let sc = i32(lo | (hi << 4u)) - 32;
    var q = i32((qb(blk + 32u + 32u * n + l) >> (2u * jj)) & 3u);
    if ((qb(blk + l) & (1u << (4u * n + jj))) == 0u) {
        q = q - 4;
    }
    return qf16(blk + 108u) * f32(sc) * f32(q);
}

// Six-bit scale and min of sub-block `s` (0..8) from the 12 packed bytes at `b` (get_scale_min_k4).
fn scale_min_k4(b: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(qb(b + s) & 63u), f32(qb(b + s + 4u) & 63u));
    }
    let sc = (qb(b + s + 4u) & 15u) | ((qb(b + s - 4u) >> 6u) << 4u);
    let m = (qb(b + s + 4u) >> 4u) | ((qb(b + s) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }
fn dq_q4_K(blk: u32, j: u32) -> f32 {
    let c = j / 64u;
    let hi = (j % 64u) / 32u;
    let l = j % 32u;
    let sm = scale_min_k4(blk + 4u, 2u * c + hi);
    let q = (qb(blk + 16u + 32u * c + l) >> (4u * hi)) & 15u;
    return qf16(blk) * sm.x * f32(q) - qf16(blk + 2u) * sm.y;
}

// q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
fn dq_q5_K(blk: u32, j: u32) -> f32 {
    let c = j / 64u;
    let hi = (j % 64u) / 32u;
    let l = j % 32u;
    let s = 2u * c + hi;
    let sm = scale_min_k4(blk + 4u, s);
    let h = (qb(blk + 16u + l) >> s) & 1u;
    let q = ((qb(blk + 48u + 32u * c + l) >> (4u * hi)) & 15u) | (h << 4u);
    return qf16(blk) * sm.x * f32(q) - qf16(blk + 2u) * sm.y;
}

// q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }
fn dq_q6_K(blk: u32, j: u32) -> f32 {
    let n = j / 128u;
    let w = j % 128u;
    let quarter = w / 32u;
    let l = w % 32u;
    let lo = (qb(blk + 64u * n + l + 32u * (quarter & 1u)) >> (4u * (quarter >> 1u))) & 15u;
    let h = (qb(blk + 128u + 32u * n + l) >> (2u * quarter)) & 3u;
    let q = i32(lo | (h << 4u)) - 32;
    let sc = qi8(blk + 192u + 8u * n + l / 16u + 2u * quarter);
    return qf16(blk + 208u) * sc * f32(q);
}

var<private> KVALUES_IQ4NL: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// iq4_nl { f16 d; u8 qs[16]; }: q4_0's nibble layout through a non-linear table.
fn dq_iq4_nl(blk: u32, j: u32) -> f32 {
    return qf16(blk) * KVALUES_IQ4NL[nibble32(blk + 2u, j)];
}

// iq4_xs { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: 8 sub-blocks of 32 with six-bit
// scales biased by 32.
fn dq_iq4_xs(blk: u32, j: u32) -> f32 {
    let ib = j / 32u;
    let sh = qb(blk + 2u) | (qb(blk + 3u) << 8u);
    let ls = ((qb(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u) | (((sh >> (2u * ib)) & 3u) << 4u);
    let dl = qf16(blk) * f32(i32(ls) - 32);
    return dl * KVALUES_IQ4NL[nibble32(blk + 8u + 16u * ib, j % 32u)];
}

fn q32(b: u32) -> u32 {
    return qb(b) | (qb(b + 1u) << 8u) | (qb(b + 2u) << 16u) | (qb(b + 3u) << 24u);
}

// q8_K { f32 d; i8 qs[256]; i16 bsums[16]; }
fn dq_q8_K(blk: u32, j: u32) -> f32 {
    return bitcast<f32>(q32(blk)) * qi8(blk + 4u + j);
}

var<private> KVALUES_MXFP4: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

// mxfp4 { u8 e; u8 qs[16]; }: doubled E2M1 values times half the E8M0 scale (built from bits,
// so e = 0 and e = 1 give the exact subnormals).
fn dq_mxfp4(blk: u32, j: u32) -> f32 {
    let e = qb(blk);
    let d = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
    return d * KVALUES_MXFP4[nibble32(blk + 1u, j)];
}

fn dq(blk: u32, j: u32) -> f32 {
    return dq_{{QTYPE}}(blk, j);
}
