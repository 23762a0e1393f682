// A K or V row reader for `flash_attn.wgsl` (DOT: also q · row), `flash_attn_tile.wgsl` (values
// only) and `flash_attn_vec.wgsl` (VEC), instantiated by `flash_attn.rs` as `k_*` over src1 and
// `v_*` over src2: BLOCKS with Q8_0 for q8_0, BLOCKS alone for q4_0, neither for f32, f16 and
// bf16 (through the generated `load_srcN`; with VEC their binding is vec4<u32> words, and F32,
// F16 or BF16 says how to decode them).
// `row` is the row's first element in the binding, or its first byte for block formats
// (ggml-common.h: q8_0 { f16 d; i8 qs[32]; }, q4_0 { f16 d; u8 qs[16]; }).

#if BLOCKS
fn {{KV}}_byte(b: u32) -> u32 {
    return ({{SRC}}[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn {{KV}}_scale(blk: u32) -> f32 {
    return unpack2x16float({{KV}}_byte(blk) | ({{KV}}_byte(blk + 1u) << 8u)).x;
}

#if Q8_0
const {{KV}}_BLOCK_BYTES: u32 = 34u;

// Quant j (0..32) of the block at byte `blk`, before scaling.
fn {{KV}}_q(blk: u32, j: u32) -> f32 {
    return f32(bitcast<i32>({{KV}}_byte(blk + 2u + j) << 24u) >> 24u);
}
#else
// q4_0
const {{KV}}_BLOCK_BYTES: u32 = 18u;

fn {{KV}}_q(blk: u32, j: u32) -> f32 {
    return f32(({{KV}}_byte(blk + 2u + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u) - 8.0;
}
#endif
#endif

#if VEC
// `_raw` loads part p (values 8p .. 8p + 7) of a row as words, `_dec` decodes them: a step's
// loads are all issued before any use and held undecoded (4 words for an f16 part, not 8 floats).
#if BLOCKS
fn {{KV}}_raw(row: u32, p: u32) -> Raw {
    let blk = row + (p >> 2u) * {{KV}}_BLOCK_BYTES;
    let d = {{KV}}_scale(blk);
    let j = (p & 3u) * 8u;
    let a = d * vec4<f32>({{KV}}_q(blk, j), {{KV}}_q(blk, j + 1u), {{KV}}_q(blk, j + 2u),
        {{KV}}_q(blk, j + 3u));
    let b = d * vec4<f32>({{KV}}_q(blk, j + 4u), {{KV}}_q(blk, j + 5u), {{KV}}_q(blk, j + 6u),
        {{KV}}_q(blk, j + 7u));
    return Raw(bitcast<vec4<u32>>(a), bitcast<vec4<u32>>(b));
}

// Decoded already: the words are the floats' bits.
fn {{KV}}_dec(r: Raw) -> Part {
    return Part(bitcast<vec4<f32>>(r.w), bitcast<vec4<f32>>(r.x));
}
#endif
#if F32
// Rows start on a whole vec4 (the planner checks).
fn {{KV}}_raw(row: u32, p: u32) -> Raw {
    let i = (row >> 2u) + 2u * p;
    return Raw({{SRC}}[i], {{SRC}}[i + 1u]);
}

fn {{KV}}_dec(r: Raw) -> Part {
    return Part(bitcast<vec4<f32>>(r.w), bitcast<vec4<f32>>(r.x));
}
#endif
#if F16
fn {{KV}}_raw(row: u32, p: u32) -> Raw {
    return Raw({{SRC}}[(row >> 3u) + p], vec4<u32>(0u));
}

fn {{KV}}_dec(r: Raw) -> Part {
    let w = r.w;
    return Part(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
        vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}
#endif
#if BF16
fn {{KV}}_raw(row: u32, p: u32) -> Raw {
    return Raw({{SRC}}[(row >> 3u) + p], vec4<u32>(0u));
}

fn {{KV}}_dec(r: Raw) -> Part {
    let lo = bitcast<vec4<f32>>(r.w << vec4<u32>(16u));
    let hi = bitcast<vec4<f32>>(r.w & vec4<u32>(0xffff0000u));
    return Part(vec4<f32>(lo.x, hi.x, lo.y, hi.y), vec4<f32>(lo.z, hi.z, lo.w, hi.w));
}
#endif
#else
#if BLOCKS
// Value j of the row.
fn {{KV}}_at(row: u32, j: u32) -> f32 {
    let blk = row + (j >> 5u) * {{KV}}_BLOCK_BYTES;
    return {{KV}}_scale(blk) * {{KV}}_q(blk, j & 31u);
}

#if DOT
// q · row over the D values of q in workgroup memory, one scale per block.
fn {{KV}}_dot(row: u32) -> f32 {
    var s = 0.0;
    for (var c = 0u; c < D / 32u; c++) {
        let blk = row + c * {{KV}}_BLOCK_BYTES;
        var t = 0.0;
        for (var j = 0u; j < 32u; j++) {
            t += qsh[32u * c + j] * {{KV}}_q(blk, j);
        }
        s += t * {{KV}}_scale(blk);
    }
    return s;
}
#endif
#else
fn {{KV}}_at(row: u32, j: u32) -> f32 {
    return load_{{SRC}}(row + j * t_nb({{BINDING}}u, 0u));
}

#if DOT
// 16 loads at a time (`#unroll`), all in flight together: a loop of one load per step waits
// for each in turn, which made decode attention bound by load latency.
fn {{KV}}_dot(row: u32) -> f32 {
    let nb0 = t_nb({{BINDING}}u, 0u);
    var s = 0.0;
    var i = 0u;
    for (; i + 16u <= D; i += 16u) {
#unroll j 16
        let v_$j = load_{{SRC}}(row + (i + $ju) * nb0);
#endunroll
#unroll j 16
        s += qsh[i + $ju] * v_$j;
#endunroll
    }
    for (; i < D; i++) {
        s += qsh[i] * load_{{SRC}}(row + i * nb0);
    }
    return s;
}
#endif
#endif
#endif
