// Shape gathers, one invocation per destination element (ggml_repeat, ggml_pad_ext, ggml_diag,
// ggml_tri), and ggml_add_id. Gathers copy src0 exactly (i32 bit for bit) or write a zero.
// PAD / CIRCULAR: op_u 0..3 = left padding per dim. TRI: op_u 0 = kind (0 lower: column <
// row, 1 lower with diagonal, 2 upper: column > row, 3 upper with diagonal).
// ADD_ID: src0 = a, src1 = b, src2 = ids (i32); an id outside b's rows writes NaN.

#if ADD_ID
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let o = t_unflat(3u, f);
    let id = src2[t_idx(2u, vec4<u32>(o.y, o.z, 0u, 0u))];
    let d = t_idx(3u, o);
    if (id < 0 || u32(id) >= t_ne(1u, 1u)) {
        store_dst(d, bitcast<f32>(0x7fc00000u));
        return;
    }
    let b = load_src1(t_idx(1u, vec4<u32>(o.x, u32(id), 0u, 0u)));
    store_dst(d, load_src0(t_idx(0u, o)) + b);
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let o = t_unflat(1u, f);
    let ne = vec4<u32>(t_ne(0u, 0u), t_ne(0u, 1u), t_ne(0u, 2u), t_ne(0u, 3u));
    var keep = true;
    var s = o;
#if REPEAT
    s = o % ne;
#endif
#if PAD
    let lp = vec4<u32>(op_u(0u), op_u(1u), op_u(2u), op_u(3u));
    keep = all(o >= lp) && all(o - lp < ne);
    s = o - lp;
#endif
#if CIRCULAR
    let lp = vec4<u32>(op_u(0u), op_u(1u), op_u(2u), op_u(3u));
    s = (o + ne - lp) % ne;
#endif
#if DIAG
    keep = o.x == o.y;
    s = vec4<u32>(o.x, 0u, o.z, o.w);
#endif
#if TRI
    switch op_u(0u) {
        case 0u: { keep = o.x < o.y; }
        case 1u: { keep = o.x <= o.y; }
        case 2u: { keep = o.x > o.y; }
        default: { keep = o.x >= o.y; }
    }
#endif
    let d = t_idx(1u, o);
    if (!keep) {
        store_dst(d, 0.0);
        return;
    }
    let si = t_idx(0u, s);
#if COPY_INT
    dst[d] = src0[si];
#else
    store_dst(d, load_src0(si));
#endif
}
#endif
