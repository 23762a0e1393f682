// Activations rounded to int8 per unit of 32 values, for the mat-vec's Q8X path (as ggml's
// CPU and CUDA backends round them to q8_0 / q8_1 in front of quantized weights): a lane per
// unit, workgroups along the units (workgroup z: the column), so the dispatch is one memory round
// trip wide (one workgroup a column would be a serial walk). Unit u of column c becomes 32 signed
// bytes q (value order) and a scale d = max|x| / 127, so x ≈ d · q.
// src0: x, f32 [K, columns] bound as vec4s (op_u(0) = K / 32 units, op_u(1) = columns).
// NORM: src0 is h and src1 the f32 row g (vec4s): the unit is h · g, and its sum of h² is
//   stored too; the product sums them and scales by the rms norm's 1 / sqrt(mean(h²) + eps).
// dst (vec4<u32>), C columns of U units: column c's unit u at vec4s 2 (c U + u) and
//   2 (c U + u) + 1, its scale at word 8 C U + c U + u, its sum of h² at word 9 C U + c U + u.

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
    let c = wid.z;
    let u = group_id(wid, nwg) * {{WG}}u + lid;
    if (u >= units) {
        return;
    }
    let x0 = t_idx(0u, vec4<u32>(0u, c, 0u, 0u)) / 4u + 8u * u;
    var v: array<vec4<f32>, 8>;
    var amax = vec4<f32>(0.0);
#if NORM
    let g0 = t_off(1u) / 4u + 8u * u;
    var ss = 0.0;
#endif
#unroll j 8
    v[$j] = src0[x0 + $ju];
#if NORM
    ss += dot(v[$j], v[$j]);
    v[$j] *= src1[g0 + $ju];
#endif
    amax = max(amax, abs(v[$j]));
#endunroll
    let m = max(max(amax.x, amax.y), max(amax.z, amax.w));
    let s = select(1.0 / m, 0.0, m == 0.0);
    let base = t_off(DST);
    let o = base / 4u + 2u * (c * units + u);
    dst[o] = vec4<u32>(pack4x8snorm(v[0] * s), pack4x8snorm(v[1] * s),
                       pack4x8snorm(v[2] * s), pack4x8snorm(v[3] * s));
    dst[o + 1u] = vec4<u32>(pack4x8snorm(v[4] * s), pack4x8snorm(v[5] * s),
                            pack4x8snorm(v[6] * s), pack4x8snorm(v[7] * s));
    let dw = base + 8u * cols * units + c * units + u;
    dst[dw / 4u][dw % 4u] = bitcast<u32>(m / 127.0);
#if NORM
    let sw = base + 9u * cols * units + c * units + u;
    dst[sw / 4u][sw % 4u] = bitcast<u32>(ss);
#endif
}
