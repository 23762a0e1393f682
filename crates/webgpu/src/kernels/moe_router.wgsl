// A mixture-of-experts router (a `soft_max`, `top_k`, `get_rows` [and renormalization by
// `sum_rows` and `div`] fused; see ops/fuse.rs), one workgroup per token t: the softmax of the
// token's E router logits (src0 [E, n_tokens]) as soft_max.wgsl computes it, the K most
// probable experts, largest first and ties to the lower index as top_k.wgsl orders them, into
// src1 (i32 [K, n_tokens]), and their probabilities (divided by their sum with norm) into dst
// at (slot r, token t) = t_off + r · op_u(3) + t · op_u(4).
// op_u: 0 = E (at most {{MAX_E}}), 1 = K, 2 = norm, 3 and 4 = dst's strides.
//
// Probabilities compare as ordered u32 keys (NaN, only from NaN logits, above every number, as
// top_k has it); a taken expert's key becomes 0. Each of the K rounds reduces every
// invocation's best (key, then lower index) across the workgroup.

const MAX_E: u32 = {{MAX_E}}u;

var<workgroup> prob: array<f32, MAX_E>;
var<workgroup> keys: array<u32, MAX_E>;
var<workgroup> best_k: array<u32, {{WG}}>;
var<workgroup> best_i: array<u32, {{WG}}>;
var<workgroup> picked: array<f32, MAX_E>;

fn order_key(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Whether (ka, ia) ranks above (kb, ib): the larger key, then the lower index.
fn above(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = group_id(wid, nwg);
    if (t >= n_items()) {
        return;
    }
    let n = op_u(0u);
    let k = op_u(1u);
    let src = t_idx(0u, vec4<u32>(0u, t, 0u, 0u));
    let s0 = t_nb(0u, 0u);
    var mx = -3.402823e38;
    for (var j = lid; j < n; j += WG) {
        let w = load_src0(src + j * s0);
        prob[j] = w;
        mx = max(mx, w);
    }
    mx = wg_max(lid, mx);
    var sum = 0.0;
    for (var j = lid; j < n; j += WG) {
        let e = exp(prob[j] - mx);
        prob[j] = e;
        sum += e;
    }
    sum = wg_sum(lid, sum);
    let inv = 1.0 / sum;
    for (var j = lid; j < n; j += WG) {
        let p = prob[j] * inv;
        prob[j] = p;
        keys[j] = order_key(p);
    }
    workgroupBarrier();
    for (var r = 0u; r < k; r++) {
        var bk = 0u;
        var bi = 0xffffffffu;
        for (var j = lid; j < n; j += WG) {
            if (above(keys[j], j, bk, bi)) {
                bk = keys[j];
                bi = j;
            }
        }
        best_k[lid] = bk;
        best_i[lid] = bi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s / 2u) {
            if (lid < s && above(best_k[lid + s], best_i[lid + s], best_k[lid], best_i[lid])) {
                best_k[lid] = best_k[lid + s];
                best_i[lid] = best_i[lid + s];
            }
            workgroupBarrier();
        }
        if (lid == 0u) {
            let i = best_i[0];
            src1[t_idx(1u, vec4<u32>(r, t, 0u, 0u))] = i32(i);
            picked[r] = prob[i];
            keys[i] = 0u;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var total = 1.0;
        if (op_u(2u) != 0u) {
            total = 0.0;
            for (var r = 0u; r < k; r++) {
                total += picked[r];
            }
        }
        for (var r = 0u; r < k; r++) {
            dst[t_off(2u) + r * op_u(3u) + t * op_u(4u)] = picked[r] / total;
        }
    }
}
