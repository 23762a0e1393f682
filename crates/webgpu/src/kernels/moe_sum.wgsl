// The weighted sum of a mixture of experts' outputs (a `mul` and the n_used - 1 `add`s of its
// slot views fused; see ops/fuse.rs): dst[i, t] = sum over slots s of src0[i, s, t] ·
// src1[0, s, t], src0 the experts' outputs [n_embd, n_used, n_tokens], src1 their weights
// [1, n_used, n_tokens], summed in slot order as the adds do; with RESIDUAL, plus src2 (the
// residual stream, added last as the unfused add does). An invocation per element.

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let width = t_ne(0u, 0u);
    let i = f % width;
    let t = f / width;
    var s = 0.0;
    for (var k = 0u; k < t_ne(0u, 1u); k++) {
        let x = load_src0(t_idx(0u, vec4<u32>(i, k, t, 0u)));
        s += x * load_src1(t_idx(1u, vec4<u32>(0u, k, t, 0u)));
    }
#if RESIDUAL
    s += load_src2(t_idx(2u, vec4<u32>(i, t, 0u, 0u)));
#endif
    store_dst(t_idx({{D}}u, vec4<u32>(i, t, 0u, 0u)), s);
}
