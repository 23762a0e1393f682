// The sum of a product split along k (`mul_mat_coop.wgsl` with op_u(7) splits): dst[m, n] =
// sum over s of src0[m, n, s], src0 the splits' f32 results [M, N, splits] (contiguous), dst
// the product's result in its own layout. op_u: 0 = M, 1 = N, 2 = splits. An invocation per
// result element; neighbouring invocations read neighbouring rows m.

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let m_len = op_u(0u);
    let slice = m_len * op_u(1u);
    let s0 = t_off(0u) + f;
    var s = 0.0;
    for (var k = 0u; k < op_u(2u); k++) {
        s += src0[s0 + k * slice];
    }
    store_dst(t_idx(1u, vec4<u32>(f % m_len, f / m_len, 0u, 0u)), s);
}
