// dst[i0, i10, i11, i12] = src0[i0, src1[i10, i11, i12], i11 % ne02, i12 % ne03] (ggml_get_rows).
// src1 holds i32 row indices. Quantized tables are decoded one value at a time with dq().
// op_u(0) is the first table row bound: a table over the binding limit is bound as windows of
// rows, one dispatch each, and a dispatch writes only the rows its window holds.

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let o = t_unflat(2u, f);
    let r = u32(src1[t_idx(1u, vec4<u32>(o.y, o.z, o.w, 0u))]) - op_u(0u);
    if (r >= t_ne(0u, 1u)) {
        return;
    }
    let d = t_idx(2u, o);
    let i2 = o.z % t_ne(0u, 2u);
    let i3 = o.w % t_ne(0u, 3u);
#if QUANT
    let row = t_idx(0u, vec4<u32>(0u, r, i2, i3));
    let blk = row + (o.x / {{BLOCK}}u) * {{TYPE_SIZE}}u;
    store_dst(d, dq(blk, o.x % {{BLOCK}}u));
#else
    let s = t_idx(0u, vec4<u32>(o.x, r, i2, i3));
#if COPY_INT
    dst[d] = src0[s];
#else
    store_dst(d, load_src0(s));
#endif
#endif
}
