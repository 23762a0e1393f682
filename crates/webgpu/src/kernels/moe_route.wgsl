// The routes of a mixture-of-experts product on the tiled kernels (`mul_mat_id` through
// `mul_mat_tiled.wgsl` or `mul_mat_coop.wgsl` with ID): the columns c = slot + n_used · token
// of ids [n_used, n_tokens] (src0, i32) bucketed by expert, in column order. One workgroup per
// bucket b (workgroup x): experts 0 .. E - 1, and bucket E for the ids outside them. dst (i32):
// dst[b] = the bucket's count, dst[E + 1 + b · C + j] its j-th column, C = n_used · n_tokens
// (a token may pick an expert more than once). op_u: 0 = E, 1 = C.
// Each invocation takes a run of consecutive columns: it counts its matches, a scan of the
// counts across the workgroup gives its first place, and it writes them in order.

const WG: u32 = {{WG}}u;

var<workgroup> scan: array<u32, {{WG}}>;

// Whether column c's id falls in bucket b of E experts.
fn in_bucket(c: u32, b: u32, n_exp: u32) -> bool {
    let n_used = t_ne(0u, 0u);
    let id = src0[t_idx(0u, vec4<u32>(c % n_used, c / n_used, 0u, 0u))];
    return select(u32(id), n_exp, id < 0 || u32(id) >= n_exp) == b;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.x;
    let n_exp = op_u(0u);
    let cols = op_u(1u);
    let per = (cols + WG - 1u) / WG;
    let c0 = min(lid * per, cols);
    let c1 = min(c0 + per, cols);
    var n = 0u;
    for (var c = c0; c < c1; c++) {
        n += u32(in_bucket(c, b, n_exp));
    }
    // Inclusive scan (Hillis-Steele) of the counts.
    scan[lid] = n;
    workgroupBarrier();
    for (var s = 1u; s < WG; s *= 2u) {
        var v = 0u;
        if (lid >= s) {
            v = scan[lid - s];
        }
        workgroupBarrier();
        scan[lid] += v;
        workgroupBarrier();
    }
    var j = scan[lid] - n;
    let list = n_exp + 1u + b * cols;
    for (var c = c0; c < c1; c++) {
        if (in_bucket(c, b, n_exp)) {
            dst[t_idx(1u, vec4<u32>(list + j, 0u, 0u, 0u))] = i32(c);
            j++;
        }
    }
    if (lid == WG - 1u) {
        dst[t_idx(1u, vec4<u32>(b, 0u, 0u, 0u))] = i32(scan[lid]);
    }
}
