// ggml_soft_max_ext, one workgroup per row (i1, i2, i3) of src0: w = x * scale + slope * mask,
// dst = exp(w - max) / sum(exp(w - max)), with an optional per-head sink logit joining the max
// and the denominator. src1 is the mask (row (i1, i2 % m2, i3 % m3)), src2 the sinks; absent
// ones are bound to src0 and their blocks compiled out.
// op_f: 0 = scale, 1 = max_bias, 2 = m0, 3 = m1; op_u(4) = n_head_log2.

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    let n1 = t_ne(0u, 1u);
    let n2 = t_ne(0u, 2u);
    let r = vec4<u32>(0u, row % n1, (row / n1) % n2, row / (n1 * n2));
    let n = select(0u, t_ne(0u, 0u), row < n_items());
    let src = t_idx(0u, r);
    let od = t_idx(3u, r);
    let s0 = t_nb(0u, 0u);
    let d0 = t_nb(3u, 0u);
    let scale = op_f(0u);
#if MASK
    let mrow = t_idx(1u, vec4<u32>(0u, r.y, r.z % t_ne(1u, 2u), r.w % t_ne(1u, 3u)));
    let m0 = t_nb(1u, 0u);
    let sl = alibi(r.z);
#endif
    var mx = -3.402823e38;
    for (var i = lid; i < n; i += WG) {
        var w = load_src0(src + i * s0) * scale;
#if MASK
        w += sl * load_src1(mrow + i * m0);
#endif
        store_dst(od + i * d0, w);
        mx = max(mx, w);
    }
    mx = wg_max(lid, mx);
#if SINKS
    let sink = load_src2(t_idx(2u, vec4<u32>(r.z, 0u, 0u, 0u)));
    mx = max(mx, sink);
#endif
    var sum = 0.0;
    for (var i = lid; i < n; i += WG) {
        let e = exp(dst[od + i * d0] - mx);
        store_dst(od + i * d0, e);
        sum += e;
    }
    sum = wg_sum(lid, sum);
#if SINKS
    sum += exp(sink - mx);
#endif
    let inv = 1.0 / sum;
    for (var i = lid; i < n; i += WG) {
        store_dst(od + i * d0, dst[od + i * d0] * inv);
    }
}
