// Routed columns of a mixture-of-experts product on the tiled kernels (`mul_mat_tiled.wgsl`
// and `mul_mat_coop.wgsl` with ID): src0 holds the experts [K, M, E], src1 the activations
// [K, b.ne1, n_tokens], src2 `moe_route.wgsl`'s buckets, dst [M, n_used, n_tokens]. Workgroup
// z is bucket b: expert b, or E for the ids outside the experts (their columns get NaN, as
// `mul_mat_id.wgsl` gives them). A tile's columns are the bucket's columns from n0; the
// workgroups along n step over the bucket by their count. op_u(2) = the buckets' capacity C,
// op_u(3) = E, op_u(6) = tiles along n in the grid.

// The number of columns in bucket b, uniform across the workgroup. The tiled kernel's 64-row
// tiles fill WebGPU's default 16 KiB of workgroup memory, so there the count passes through the
// first slot of its tile `a_sh` before any tile is loaded (the uniform load is fenced by
// barriers on both sides).
#if ROUTE_COUNT_IN_TILE
fn route_len(b: u32, lid: u32) -> u32 {
    if (lid == 0u) {
        a_sh[0].x = bitcast<f32>(u32(src2[t_idx(2u, vec4<u32>(b, 0u, 0u, 0u))]));
    }
    return bitcast<u32>(workgroupUniformLoad(&a_sh[0]).x);
}
#else
var<workgroup> route_count: u32;

fn route_len(b: u32, lid: u32) -> u32 {
    if (lid == 0u) {
        route_count = u32(src2[t_idx(2u, vec4<u32>(b, 0u, 0u, 0u))]);
    }
    return workgroupUniformLoad(&route_count);
}
#endif

// (slot, token) of column j of bucket b.
fn route_col(b: u32, j: u32) -> vec2<u32> {
    let i = op_u(3u) + 1u + b * op_u(2u) + j;
    let c = u32(src2[t_idx(2u, vec4<u32>(i, 0u, 0u, 0u))]);
    let n_used = t_ne(3u, 1u);
    return vec2<u32>(c % n_used, c / n_used);
}

// Index in src1 (vec4s) of the activations of (slot, token): b[:, slot % b.ne1, token].
fn route_src1(sc: vec2<u32>) -> u32 {
    return t_idx(1u, vec4<u32>(0u, sc.x % t_ne(1u, 1u), sc.y, 0u)) / 4u;
}

// Index in dst of row m of (slot, token).
fn route_dst(m: u32, sc: vec2<u32>) -> u32 {
    return t_idx(3u, vec4<u32>(m, sc.x, sc.y, 0u));
}

// NaN into rows m0 .. m0 + bm of columns n0 .. n0 + bn of the bucket of ids outside the
// experts (`n_len` columns), by `wg` invocations.
fn route_nan(lid: u32, wg: u32, m0: u32, bm: u32, n0: u32, bn: u32, n_len: u32) {
    for (var i = lid; i < bm * bn; i += wg) {
        let m = m0 + i % bm;
        let j = n0 + i / bm;
        if (m < op_u(1u) && j < n_len) {
            store_dst(route_dst(m, route_col(op_u(3u), j)), bitcast<f32>(0x7fc00000u));
        }
    }
}
