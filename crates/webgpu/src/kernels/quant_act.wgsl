// Activations rounded to int8 per unit of 32 values, for the mat-vec's Q8X path (as ggml's
// CPU and CUDA backends round them to q8_0 / q8_1 in front of quantized weights): one
// workgroup per activation column, a lane per unit; unit u of column c becomes 32 signed bytes
// q (value order) and a scale d = max|x| / 127, so x ≈ d · q.
// src0: x, f32 [K, columns] bound as vec4s (op_u(0) = K / 32 units, op_u(1) = columns).
// NORM: src0 is h and src1 the f32 row g (vec4s): x = rms_norm(h) · g (eps = op_f(2)), the
//   whole norm taken here, so the product needs none.
// dst (vec4<u32>): column c's unit u at vec4s 2 (c U + u) and 2 (c U + u) + 1; its scale at
//   word 8 C U + c U + u (C columns of U units).

#if NORM
const DST: u32 = 2u;
#else
const DST: u32 = 1u;
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let units = op_u(0u);
    let cols = op_u(1u);
    let c = group_id(wid, nwg);
    if (c >= cols) {
        return;
    }
    let x0 = t_idx(0u, vec4<u32>(0u, c, 0u, 0u)) / 4u;
#if NORM
    // The sum of squares, four vec4 loads of a lane in flight at once (a plain loop, one load
    // waiting for the last, made this dispatch ~11 us of an 8B decode step on an H200).
    let n4 = 8u * units;
    var ss = 0.0;
    for (var i0 = lid; i0 < n4; i0 += 4u * WG) {
#unroll j 4
        let i_$j = i0 + $ju * WG;
        let v_$j = select(vec4<f32>(0.0), src0[x0 + min(i_$j, n4 - 1u)], i_$j < n4);
        ss += dot(v_$j, v_$j);
#endunroll
    }
    let inv = 1.0 / sqrt(wg_sum(lid, ss) / f32(32u * units) + op_f(2u));
    let g0 = t_off(1u) / 4u;
#endif
    let q0 = t_off(DST) / 4u;
    let d0 = t_off(DST) + 8u * cols * units;
    for (var u = lid; u < units; u += WG) {
        var v: array<vec4<f32>, 8>;
        var amax = vec4<f32>(0.0);
#unroll j 8
        v[$j] = src0[x0 + 8u * u + $ju];
#if NORM
        v[$j] *= src1[g0 + 8u * u + $ju] * inv;
#endif
        amax = max(amax, abs(v[$j]));
#endunroll
        let m = max(max(amax.x, amax.y), max(amax.z, amax.w));
        let s = select(1.0 / m, 0.0, m == 0.0);
        let o = q0 + 2u * (c * units + u);
        dst[o] = vec4<u32>(pack4x8snorm(v[0] * s), pack4x8snorm(v[1] * s),
                           pack4x8snorm(v[2] * s), pack4x8snorm(v[3] * s));
        dst[o + 1u] = vec4<u32>(pack4x8snorm(v[4] * s), pack4x8snorm(v[5] * s),
                                pack4x8snorm(v[6] * s), pack4x8snorm(v[7] * s));
        let dw = d0 + c * units + u;
        dst[dw / 4u][dw % 4u] = bitcast<u32>(m / 127.0);
    }
}
