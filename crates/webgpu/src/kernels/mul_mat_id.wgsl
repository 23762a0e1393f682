// dst[m, e, t] = sum_k src0[k, m, x] * src1[k, e % src1.ne1, t] with x = ids[e, t]
// (ggml_mul_mat_id), accumulated in f32, for what `mul_mat_vec.wgsl`'s ID does not take (see
// ops/moe.rs). One workgroup per (weight row m, column e + n_used * t):
// its {{WG}} invocations split K and reduce in workgroup memory. src2 = ids (i32); an id outside
// the experts writes NaN. op_u: 0 = K, 1 = M, 2 = columns (n_used * n_tokens).

const WG: u32 = {{WG}}u;

var<workgroup> partial: array<f32, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    let m_len = op_u(1u);
    let m = g % m_len;
    let col = g / m_len;
    let n_used = t_ne(2u, 0u);
    let e = col % n_used;
    let t = col / n_used;
    let valid = col < op_u(2u);
    var id = -1;
    if (valid) {
        id = src2[t_idx(2u, vec4<u32>(e, t, 0u, 0u))];
    }
    let ok = valid && id >= 0 && u32(id) < t_ne(0u, 2u);
    let x = select(0u, u32(id), ok);
    let k_len = select(0u, op_u(0u), ok);
    let bcol = e % t_ne(1u, 1u);
    var acc = 0.0;
#if QUANT
    let row = t_idx(0u, vec4<u32>(0u, m, x, 0u));
    let units = k_len / 32u;
    for (var u = lid; u < units; u += WG) {
        let blk = row + (u / {{SUBS}}u) * {{TYPE_SIZE}}u;
        let j0 = (u % {{SUBS}}u) * 32u;
        let k0 = u * 32u;
        for (var jj = 0u; jj < 32u; jj++) {
            acc += dq(blk, j0 + jj) * load_src1(t_idx(1u, vec4<u32>(k0 + jj, bcol, t, 0u)));
        }
    }
#else
    for (var k = lid; k < k_len; k += WG) {
        acc += load_src0(t_idx(0u, vec4<u32>(k, m, x, 0u)))
            * load_src1(t_idx(1u, vec4<u32>(k, bcol, t, 0u)));
    }
#endif
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (valid && lid == 0u) {
        let d = t_idx(3u, vec4<u32>(m, e, t, 0u));
        store_dst(d, select(bitcast<f32>(0x7fc00000u), partial[0], ok));
    }
}
