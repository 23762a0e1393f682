// dst[:, src1[i, i02 % n11, i03 % n12], i02, i03] = src0[:, i, i02, i03] (ggml_set_rows), in place.
// src1 holds i32 indices, or i64 read as pairs of u32 words (indices below 2^31).
// Float destinations: one invocation per value. Block-quantized destinations (QUANT_DST: q8_0,
// q4_0): one invocation per 32-value block, quantized as wgllm_core::quant does (ggml's
// quantize_row_*_ref) and written through atomics, since 34- and 18-byte blocks share words.

fn row_index(k: u32) -> u32 {
#if IDX_I64
    return src1[2u * k];
#else
    return u32(src1[k]);
#endif
}

#if QUANT_DST
// The bytes of the block being written, one per element.
var<private> qbytes: array<u32, {{DST_TYPE_SIZE}}>;

// f32 -> f16 bits with round-to-nearest-even (half::f16::from_f32), in integer arithmetic so
// the result does not depend on the device's own conversion.
fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u | ((a >> 13u) & 0x3ffu);
    }
    if (a >= 0x47800000u) {
        return sign | 0x7c00u;
    }
    if (a < 0x38800000u) {
        // Subnormal f16: units of 2^-24, scaled exactly, round() is half-to-even.
        return sign | u32(round(bitcast<f32>(a) * 16777216.0));
    }
    let h = (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
    let rest = a & 0x1fffu;
    let up = rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u);
    return sign | (h + select(0u, 1u, up));
}

// Rounding half away from zero (Rust's f32::round, C's roundf); WGSL's round() is half-to-even.
fn round_away(x: f32) -> f32 {
    let t = trunc(x);
    return select(t, t + sign(x), abs(x - t) >= 0.5);
}

// Writes qbytes to bytes o.. of dst: whole words with a store, shared words by clearing and
// setting only this block's bytes.
fn put_block(o: u32) {
    let n = {{DST_TYPE_SIZE}}u;
    for (var w = o >> 2u; w <= (o + n - 1u) >> 2u; w++) {
        var val = 0u;
        var mask = 0u;
        for (var b = 0u; b < 4u; b++) {
            let p = w * 4u + b;
            if (p >= o && p < o + n) {
                val |= qbytes[p - o] << (8u * b);
                mask |= 0xffu << (8u * b);
            }
        }
        if (mask == 0xffffffffu) {
            atomicStore(&dst[w], val);
        } else {
            atomicAnd(&dst[w], ~mask);
            atomicOr(&dst[w], val);
        }
    }
}

fn put_scale(d: f32) {
    let h = f16_bits(d);
    qbytes[0] = h & 0xffu;
    qbytes[1] = h >> 8u;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let nblk = t_ne(0u, 0u) / 32u;
    let blk = f % nblk;
    let r1 = f / nblk;
    let n1 = t_ne(0u, 1u);
    let n2 = t_ne(0u, 2u);
    let i = vec4<u32>(blk * 32u, r1 % n1, (r1 / n1) % n2, r1 / (n1 * n2));
    let k = t_idx(1u, vec4<u32>(i.y, i.z % t_ne(1u, 1u), i.w % t_ne(1u, 2u), 0u));
    let r = row_index(k);
    var x: array<f32, 32>;
    var amax = 0.0;
    var smax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        x[j] = load_src0(t_idx(0u, i + vec4<u32>(j, 0u, 0u, 0u)));
        if (abs(x[j]) > abs(smax)) {
            smax = x[j];
        }
        amax = max(amax, abs(x[j]));
    }
#if Q8_0
    // q8_0 { f16 d; i8 qs[32]; }: d = max|x| / 127, q = round(x / d).
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    put_scale(d);
    for (var j = 0u; j < 32u; j++) {
        qbytes[2u + j] = u32(i32(round_away(x[j] * id))) & 0xffu;
    }
#else
    // q4_0 { f16 d; u8 qs[16]; }: d = x[argmax |x|] / -8, q = min(trunc(x / d + 8.5), 15).
    let d = smax / -8.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    put_scale(d);
    for (var j = 0u; j < 16u; j++) {
        let lo = u32(clamp(trunc(x[j] * id + 8.5), 0.0, 15.0));
        let hi = u32(clamp(trunc(x[j + 16u] * id + 8.5), 0.0, 15.0));
        qbytes[2u + j] = lo | (hi << 4u);
    }
#endif
    put_block(t_idx(2u, vec4<u32>(0u, r, i.z, i.w)) + blk * {{DST_TYPE_SIZE}}u);
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let i = t_unflat(0u, f);
    let k = t_idx(1u, vec4<u32>(i.y, i.z % t_ne(1u, 1u), i.w % t_ne(1u, 2u), 0u));
    let r = row_index(k);
    store_dst(t_idx(2u, vec4<u32>(i.x, r, i.z, i.w)), load_src0(t_idx(0u, i)));
}
#endif
