// dst[:, src1[i, i02 % n11, i03 % n12], i02, i03] = src0[:, i, i02, i03] (ggml_set_rows), in place.
// src1 holds i32 indices, or i64 read as pairs of u32 words (indices below 2^31).

fn row_index(k: u32) -> u32 {
#if IDX_I64
    return src1[2u * k];
#else
    return u32(src1[k]);
#endif
}

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
