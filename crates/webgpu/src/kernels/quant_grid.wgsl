// Decoders of the IQ codebook formats (layouts from ggml-common.h, formulas and float order as
// wgllm_core::quant::iquants). `GRID` and `grid_byte(row, i)` are generated before this file
// from the format's codebook.

fn q16(b: u32) -> u32 {
    return qb(b) | (qb(b + 1u) << 8u);
}

// ksigns_iq2xs: 7 stored sign bits completed with an even-parity eighth.
fn ksigns(i: u32) -> u32 {
    return i | ((countOneBits(i) & 1u) << 7u);
}

// `scale * grid value`, negated where bit i of `signs` is set.
fn signed(scale: f32, g: u32, signs: u32, i: u32) -> f32 {
    let a = scale * f32(g);
    return select(a, -a, ((signs >> i) & 1u) == 1u);
}

// iq2_xxs { f16 d; u16 qs[32]; }: per 32 values 4 grid indices, then a u32 of 4 x 7 sign bits
// and a 4-bit scale.
fn dq_iq2_xxs(blk: u32, j: u32) -> f32 {
    let ib = j / 32u;
    let l = (j % 32u) / 8u;
    let aux = q32(blk + 6u + 8u * ib);
    let db = qf16(blk) * (0.5 + f32(aux >> 28u)) * 0.25;
    let signs = ksigns((aux >> (7u * l)) & 127u);
    return signed(db, grid_byte(qb(blk + 2u + 8u * ib + l), j % 8u), signs, j % 8u);
}

// iq2_xs { f16 d; u16 qs[32]; u8 scales[8]; }: 9-bit grid index and 7 sign bits per 8 values.
fn dq_iq2_xs(blk: u32, j: u32) -> f32 {
    let k = j / 8u;
    let q = q16(blk + 2u + 2u * k);
    let s = (qb(blk + 66u + k / 4u) >> (4u * ((k / 2u) % 2u))) & 15u;
    let db = qf16(blk) * (0.5 + f32(s)) * 0.25;
    return signed(db, grid_byte(q & 511u, j % 8u), ksigns(q >> 9u), j % 8u);
}

// iq2_s { f16 d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8]; }
fn dq_iq2_s(blk: u32, j: u32) -> f32 {
    let k = j / 8u;
    let hi = (qb(blk + 66u + k / 4u) >> (2u * (k % 4u))) & 3u;
    let idx = qb(blk + 2u + k) | (hi << 8u);
    let s = (qb(blk + 74u + k / 4u) >> (4u * ((k / 2u) % 2u))) & 15u;
    let db = qf16(blk) * (0.5 + f32(s)) * 0.25;
    return signed(db, grid_byte(idx, j % 8u), qb(blk + 34u + k), j % 8u);
}

// iq3_xxs { f16 d; u8 qs[64]; u32 scales_and_signs[8]; }: rows of 4 values.
fn dq_iq3_xxs(blk: u32, j: u32) -> f32 {
    let ib = j / 32u;
    let l = (j % 32u) / 8u;
    let i = j % 8u;
    let aux = q32(blk + 66u + 4u * ib);
    let db = qf16(blk) * (0.5 + f32(aux >> 28u)) * 0.5;
    let signs = ksigns((aux >> (7u * l)) & 127u);
    let g = qb(blk + 2u + 8u * ib + 2u * l + i / 4u);
    return signed(db, grid_byte(g, i % 4u), signs, i);
}

// iq3_s { f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]; }: rows of 4 values.
fn dq_iq3_s(blk: u32, j: u32) -> f32 {
    let ib = j / 32u;
    let e = j / 4u;
    let s = (qb(blk + 106u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
    let db = qf16(blk) * f32(1u + 2u * s);
    let idx = qb(blk + 2u + e) | (((qb(blk + 66u + e / 8u) >> (e % 8u)) & 1u) << 8u);
    let sign = qb(blk + 74u + e / 2u) >> (4u * (e % 2u));
    return signed(db, grid_byte(idx, j % 4u), sign, j % 4u);
}

// IQ1 value: dl * (grid + delta), grid entries -1, 0 or 1 stored as bytes.
fn iq1(dl: f32, idx: u32, i: u32, delta: f32) -> f32 {
    let g = f32(bitcast<i32>(grid_byte(idx, i) << 24u) >> 24u);
    return dl * (g + delta);
}

// iq1_s { f16 d; u8 qs[32]; u16 qh[8]; }
fn dq_iq1_s(blk: u32, j: u32) -> f32 {
    let ib = j / 32u;
    let l = (j % 32u) / 8u;
    let qh = q16(blk + 34u + 2u * ib);
    let dl = qf16(blk) * f32(2u * ((qh >> 12u) & 7u) + 1u);
    let delta = select(0.125, -0.125, (qh & 0x8000u) != 0u);
    let idx = qb(blk + 2u + 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8u);
    return iq1(dl, idx, j % 8u, delta);
}

// iq1_m { u8 qs[32]; u8 qh[16]; u8 scales[8]; }: the f16 super-scale is the top nibbles of
// the four scale words.
fn dq_iq1_m(blk: u32, j: u32) -> f32 {
    let k = j / 8u;
    let d_bits = (q16(blk + 48u) >> 12u) | ((q16(blk + 50u) >> 8u) & 0xf0u)
        | ((q16(blk + 52u) >> 4u) & 0xf00u) | (q16(blk + 54u) & 0xf000u);
    let d = unpack2x16float(d_bits).x;
    let jj = k / 2u;
    let s = (q16(blk + 48u + 2u * (jj / 4u)) >> (3u * (jj % 4u))) & 7u;
    let dl = d * f32(2u * s + 1u);
    let h = qb(blk + 32u + k / 2u) >> (4u * (k % 2u));
    let idx = qb(blk + k) | ((h & 7u) << 8u);
    let delta = select(0.125, -0.125, (h & 8u) != 0u);
    return iq1(dl, idx, j % 8u, delta);
}
