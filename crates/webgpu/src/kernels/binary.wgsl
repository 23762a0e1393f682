// dst = src0 {{OP}} src1, src1 broadcast (tiled) over src0's extents; dst has src0's extents.

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let i = t_unflat(2u, f);
    let ib = vec4<u32>(i.x % t_ne(1u, 0u), i.y % t_ne(1u, 1u), i.z % t_ne(1u, 2u), i.w % t_ne(1u, 3u));
    let a = load_src0(t_idx(0u, i));
    let b = load_src1(t_idx(1u, ib));
    store_dst(t_idx(2u, i), a {{OP}} b);
}
