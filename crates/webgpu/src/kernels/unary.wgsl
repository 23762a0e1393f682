// Element maps src0 -> dst: every unary op, scale, clamp, fill, and cpy/cont conversions.
// `x` is the source value in f32; {{EXPR}} is the op's f32 expression of `x` (and op_f(i)).
// The source and destination may have different extents with the same element count (cpy):
// item f is the f-th element of each in flat order.

fn map_op(x: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let s = t_idx(0u, t_unflat(0u, f));
    let d = t_idx(1u, t_unflat(1u, f));
#if COPY_INT
    dst[d] = src0[s];
#else
    store_dst(d, map_op(load_src0(s)));
#endif
}
