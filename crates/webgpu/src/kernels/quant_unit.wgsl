// Whole-unit weight decoders for the mat-vec kernel: `unit(row, u)` returns the 32 values of unit
// u (values 32u .. 32u + 31) of a weight row starting at `row` (a byte offset for block formats,
// an element offset for floats), as 8 vec4s in order. Each decoder loads every word it needs
// once, instead of one byte load per value as `dq` does. Layouts follow ggml-common.h; the
// formulas are those of `quant.wgsl` (and dequantize_row_* in ggml-quants.c).
// Exactly one `U_*` flag is set per variant. Weight words are read through `ldw(i)`, which the
// including kernel defines (a kernel with two weights switches on `wsel`); f32 weights are bound
// as words too.

#if U_BLOCKS
// The 32-bit word at byte `b`, for a `b` that is only 2-aligned (blocks of 18, 22, 34, 210 bytes).
fn w2(b: u32) -> u32 {
    let i = b >> 2u;
    if ((b & 2u) == 0u) {
        return ldw(i);
    }
    return (ldw(i) >> 16u) | (ldw(i + 1u) << 16u);
}

// The aligned words from the one holding byte `b` on, for a block at a 2-aligned `b`: `hi` says
// whether `b` is the word's upper half. The word at byte b + 2 + 4j is then r[j + 1] when `hi`,
// else the funnel of r[j] and r[j + 1]. (Reading one word past a block is covered by the slack
// every weight binding has.)
fn funnel(lo: u32, hi: u32, upper: bool) -> u32 {
    return select((lo >> 16u) | (hi << 16u), hi, upper);
}

fn bytes_u(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
}

fn bytes_i(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// The four nibbles at bit `sh` (0 or 4) of each byte of w.
fn nib(w: u32, sh: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(sh, 8u + sh, 16u + sh, 24u + sh)) & vec4<u32>(15u);
}

// Bit `s` of each byte of w, as 0 or 16.
fn bit4(w: u32, s: u32) -> vec4<u32> {
    return ((vec4<u32>(w) >> vec4<u32>(s, 8u + s, 16u + s, 24u + s)) & vec4<u32>(1u)) << vec4<u32>(4u);
}

// Four consecutive bits of `qh` from bit s, as 0 or 16 each.
fn bits4(qh: u32, s: u32) -> vec4<u32> {
    return ((vec4<u32>(qh) >> vec4<u32>(s, s + 1u, s + 2u, s + 3u)) & vec4<u32>(1u)) << vec4<u32>(4u);
}
#endif

#if U_Q4_0
// q4_0 { f16 d; u8 qs[16]; }: byte i holds value i (low nibble) and value i + 16 (high).
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let blk = row + u * 18u;
    let a = blk >> 2u;
    let up = (blk & 2u) != 0u;
    let r = array<u32, 5>(ldw(a), ldw(a + 1u), ldw(a + 2u), ldw(a + 3u), ldw(a + 4u));
    let d = unpack2x16float(select(r[0], r[0] >> 16u, up)).x;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let q = funnel(r[j], r[j + 1u], up);
        v[j] = (vec4<f32>(nib(q, 0u)) - 8.0) * d;
        v[j + 4u] = (vec4<f32>(nib(q, 4u)) - 8.0) * d;
    }
    return v;
}
#endif

#if U_Q4_1
// q4_1 { f16 d; f16 m; u8 qs[16]; } (20 bytes: word-aligned).
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let w0 = (row + u * 20u) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let q = ldw(w0 + 1u + j);
        v[j] = vec4<f32>(nib(q, 0u)) * dm.x + dm.y;
        v[j + 4u] = vec4<f32>(nib(q, 4u)) * dm.x + dm.y;
    }
    return v;
}
#endif

#if U_Q5_0
// q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }: bit i of qh is the fifth bit of value i.
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let blk = row + u * 22u;
    let a = blk >> 2u;
    let up = (blk & 2u) != 0u;
    let r = array<u32, 6>(ldw(a), ldw(a + 1u), ldw(a + 2u), ldw(a + 3u), ldw(a + 4u),
                          ldw(a + 5u));
    let d = unpack2x16float(select(r[0], r[0] >> 16u, up)).x;
    let qh = funnel(r[0], r[1], up);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let q = funnel(r[j + 1u], r[j + 2u], up);
        v[j] = (vec4<f32>(nib(q, 0u) | bits4(qh, 4u * j)) - 16.0) * d;
        v[j + 4u] = (vec4<f32>(nib(q, 4u) | bits4(qh, 16u + 4u * j)) - 16.0) * d;
    }
    return v;
}
#endif

#if U_Q5_1
// q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } (24 bytes: word-aligned).
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let w0 = (row + u * 24u) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    let qh = ldw(w0 + 1u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let q = ldw(w0 + 2u + j);
        v[j] = vec4<f32>(nib(q, 0u) | bits4(qh, 4u * j)) * dm.x + dm.y;
        v[j + 4u] = vec4<f32>(nib(q, 4u) | bits4(qh, 16u + 4u * j)) * dm.x + dm.y;
    }
    return v;
}
#endif

#if U_Q8_0
// q8_0 { f16 d; i8 qs[32]; }
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let blk = row + u * 34u;
    let a = blk >> 2u;
    let up = (blk & 2u) != 0u;
    let r = array<u32, 9>(ldw(a), ldw(a + 1u), ldw(a + 2u), ldw(a + 3u), ldw(a + 4u),
                          ldw(a + 5u), ldw(a + 6u), ldw(a + 7u), ldw(a + 8u));
    let d = unpack2x16float(select(r[0], r[0] >> 16u, up)).x;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = bytes_i(funnel(r[j], r[j + 1u], up)) * d;
    }
    return v;
}
#endif

#if U_KSCALES
// Byte j (0..3) of w.
fn byte_at(w: u32, j: u32) -> u32 {
    return (w >> (8u * j)) & 255u;
}

// Six-bit scale and min of sub-block s (0..8) from the 12 scale bytes in words s0, s1, s2
// (get_scale_min_k4). Shifts, not an array of the bytes: an array indexed by a runtime `s`
// would live in local memory.
fn kscale(s0: u32, s1: u32, s2: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(byte_at(s0, s) & 63u), f32(byte_at(s1, s) & 63u));
    }
    let t = s - 4u;
    let sc = (byte_at(s2, t) & 15u) | ((byte_at(s0, t) >> 6u) << 4u);
    let m = (byte_at(s2, t) >> 4u) | ((byte_at(s1, t) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}
#endif

#if U_Q4_K
// q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }: sub-block s = 2c + hi holds the
// `hi` nibbles of bytes 32c .. 32c + 31 of qs.
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let s = u % 8u;
    let w0 = (row + (u / 8u) * 144u) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    let sm = kscale(ldw(w0 + 1u), ldw(w0 + 2u), ldw(w0 + 3u), s);
    let d = dm.x * sm.x;
    let mn = dm.y * sm.y;
    let q0 = w0 + 4u + 8u * (s / 2u);
    let sh = 4u * (s % 2u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = vec4<f32>(nib(ldw(q0 + j), sh)) * d - mn;
    }
    return v;
}
#endif

#if U_Q5_K
// q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }: bit s of qh[l] is the fifth
// bit of value l of sub-block s.
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let s = u % 8u;
    let w0 = (row + (u / 8u) * 176u) >> 2u;
    let dm = unpack2x16float(ldw(w0));
    let sm = kscale(ldw(w0 + 1u), ldw(w0 + 2u), ldw(w0 + 3u), s);
    let d = dm.x * sm.x;
    let mn = dm.y * sm.y;
    let q0 = w0 + 12u + 8u * (s / 2u);
    let sh = 4u * (s % 2u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = vec4<f32>(nib(ldw(q0 + j), sh) | bit4(ldw(w0 + 4u + j), s)) * d - mn;
    }
    return v;
}
#endif

#if U_Q6_K
// q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } (210 bytes: 2-aligned). Sub-block
// s = 4n + quarter: low nibbles from ql[64n + 32 (quarter & 1) + l] at bit 4 (quarter >> 1),
// high bits from qh[32n + l] at bit 2 quarter; scales[8n + 2 quarter + l / 16].
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let s = u % 8u;
    let blk = row + (u / 8u) * 210u;
    let n = s / 4u;
    let quarter = s % 4u;
    let d = unpack2x16float(w2(blk + 208u)).x;
    let sc = bytes_i(w2(blk + 192u + 8u * n + 2u * quarter));
    let ql = blk + 64u * n + 32u * (quarter & 1u);
    let qh = blk + 128u + 32u * n;
    let shl = 4u * (quarter >> 1u);
    let shh = 2u * quarter;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let lo = (vec4<u32>(w2(ql + 4u * j)) >> vec4<u32>(shl, 8u + shl, 16u + shl, 24u + shl)) & vec4<u32>(15u);
        let hi = (vec4<u32>(w2(qh + 4u * j)) >> vec4<u32>(shh, 8u + shh, 16u + shh, 24u + shh)) & vec4<u32>(3u);
        let q = vec4<f32>(bitcast<vec4<i32>>(lo | (hi << vec4<u32>(4u)))) - 32.0;
        v[j] = q * (d * select(sc.x, sc.y, j >= 4u));
    }
    return v;
}
#endif

#if U_GENERIC
// Any other block format, one `dq` call per value.
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let blk = row + (u / {{SUBS}}u) * {{TYPE_SIZE}}u;
    let j0 = (u % {{SUBS}}u) * 32u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let i = j0 + 4u * j;
        v[j] = vec4<f32>(dq(blk, i), dq(blk, i + 1u), dq(blk, i + 2u), dq(blk, i + 3u));
    }
    return v;
}
#endif

#if U_F16
// f16 weights bound as raw words: value i of the row is half (i & 1) of word i / 2.
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let w0 = (row + 32u * u) >> 1u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = vec4<f32>(unpack2x16float(ldw(w0 + 2u * j)), unpack2x16float(ldw(w0 + 2u * j + 1u)));
    }
    return v;
}
#endif

#if U_BF16
// bf16 weights, two per word (the low half first).
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let w0 = (row + 32u * u) >> 1u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let a = ldw(w0 + 2u * j);
        let b = ldw(w0 + 2u * j + 1u);
        v[j] = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    }
    return v;
}
#endif

#if U_F32
fn unit(row: u32, u: u32) -> array<vec4<f32>, 8> {
    let i0 = row + 32u * u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let i = i0 + 4u * j;
        v[j] = bitcast<vec4<f32>>(vec4<u32>(ldw(i), ldw(i + 1u), ldw(i + 2u), ldw(i + 3u)));
    }
    return v;
}
#endif
