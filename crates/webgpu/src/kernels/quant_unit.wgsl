// Weight decoding shared by the matmul kernels. `part(row, u, p)` (quant_part.wgsl, one decoder
// per format) gives 8 of the 32 values of unit u (values 32u .. 32u + 31) of a weight row; here
// the helpers the part decoders use. Layouts follow ggml-common.h; the formulas are those of
// `quant.wgsl` (and dequantize_row_* in ggml-quants.c).
// Exactly one `U_*` flag is set per variant. Weight words are read through `ldw(i)`, which the
// including kernel defines (a kernel with several weights switches on `wsel`); f32 weights are
// bound as words too.

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

// The four bytes of w as signed values, by bit-field extracts (fewer instructions than shifts).
fn bytes_i(w: u32) -> vec4<f32> {
    let i = bitcast<i32>(w);
    return vec4<f32>(vec4<i32>(extractBits(i, 0u, 8u), extractBits(i, 8u, 8u),
                               extractBits(i, 16u, 8u), extractBits(i, 24u, 8u)));
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
