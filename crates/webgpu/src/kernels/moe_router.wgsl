// A mixture-of-experts router (a `soft_max`, `top_k`, `get_rows` [and renormalization by
// `sum_rows` and `div`] fused; see ops/fuse.rs), one workgroup per token t: the softmax of the
// token's E router logits (src0 [E, n_tokens]) as soft_max.wgsl computes it, the K most
// probable experts, largest first and ties to the lower index as top_k.wgsl orders them, into
// src1 (i32 [K, n_tokens]), and their probabilities (divided by their sum with norm) into dst
// at (slot r, token t) = t_off + r · op_u(3) + t · op_u(4).
// op_u: 0 = E (at most {{MAX_E}}), 1 = K, 2 = norm, 3 and 4 = dst's strides.
//
// Probabilities compare as ordered u32 keys (NaN, only from NaN logits, above every number, as
// top_k has it), then by the lower index: each expert's rank is the number of experts above
// it, counted by its invocation over the keys in workgroup memory, and the first K write
// their slots (one pass and two barriers, where K rounds of a workgroup reduction took
// 2 log2(WG) barriers each). The softmax's max and sum reduce with SUBGROUP by subgroupMax and
// subgroupAdd, then one step across the subgroups through workgroup memory, else by a
// workgroup-memory tree.

const MAX_E: u32 = {{MAX_E}}u;

var<workgroup> prob: array<f32, MAX_E>;
var<workgroup> keys: array<u32, MAX_E>;
var<workgroup> picked: array<f32, MAX_E>;
var<workgroup> sg_red: array<f32, {{WG}}>;

fn order_key(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Whether (ka, ia) ranks above (kb, ib): the larger key, then the lower index.
fn above(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

#if SUBGROUP
// The subgroups' results `v` (their lanes 0 write them), combined in subgroup order by every
// invocation: the maximum, or with `add` the sum.
fn across(v: f32, add: bool, sg_id: u32, n_sg: u32, sg_lane: u32) -> f32 {
    if (sg_lane == 0u) {
        sg_red[sg_id] = v;
    }
    workgroupBarrier();
    var r = sg_red[0];
    for (var s = 1u; s < n_sg; s++) {
        r = select(max(r, sg_red[s]), r + sg_red[s], add);
    }
    workgroupBarrier();
    return r;
}
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
#if SUBGROUP
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(num_subgroups) n_sg: u32,
#endif
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
#if SUBGROUP
    mx = across(subgroupMax(mx), false, sg_id, n_sg, sg_lane);
#else
    mx = wg_max(lid, mx);
#endif
    var sum = 0.0;
    for (var j = lid; j < n; j += WG) {
        let e = exp(prob[j] - mx);
        prob[j] = e;
        sum += e;
    }
#if SUBGROUP
    sum = across(subgroupAdd(sum), true, sg_id, n_sg, sg_lane);
#else
    sum = wg_sum(lid, sum);
#endif
    let inv = 1.0 / sum;
    for (var j = lid; j < n; j += WG) {
        let p = prob[j] * inv;
        prob[j] = p;
        keys[j] = order_key(p);
    }
    workgroupBarrier();
    // Each expert's rank is the number of experts above it: the first K go to their slots.
    for (var j = lid; j < n; j += WG) {
        let kj = keys[j];
        var rank = 0u;
        for (var i = 0u; i < n; i++) {
            rank += u32(above(keys[i], i, kj, j));
        }
        if (rank < k) {
            src1[t_idx(1u, vec4<u32>(rank, t, 0u, 0u))] = i32(j);
            picked[rank] = prob[j];
        }
    }
    workgroupBarrier();
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
