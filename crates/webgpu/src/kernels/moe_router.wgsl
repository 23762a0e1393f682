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
// invocation's best (key, then lower index) across the workgroup: with SUBGROUP by
// subgroupMax of the key and subgroupMin of the index among its holders, then one step across
// the subgroups through workgroup memory (two barriers a round), else by a workgroup-memory
// tree (two a level). The softmax's max and sum reduce the same two ways.

const MAX_E: u32 = {{MAX_E}}u;

var<workgroup> prob: array<f32, MAX_E>;
var<workgroup> keys: array<u32, MAX_E>;
var<workgroup> best_k: array<u32, {{WG}}>;
var<workgroup> best_i: array<u32, {{WG}}>;
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

// The best (key, index) of the workgroup.
fn best(bk: u32, bi: u32, sg_id: u32, n_sg: u32, sg_lane: u32) -> vec2<u32> {
    let m = subgroupMax(bk);
    let i = subgroupMin(select(0xffffffffu, bi, bk == m));
    if (sg_lane == 0u) {
        best_k[sg_id] = m;
        best_i[sg_id] = i;
    }
    workgroupBarrier();
    var k = best_k[0];
    var ix = best_i[0];
    for (var s = 1u; s < n_sg; s++) {
        if (above(best_k[s], best_i[s], k, ix)) {
            k = best_k[s];
            ix = best_i[s];
        }
    }
    workgroupBarrier();
    return vec2<u32>(k, ix);
}
#else
fn best(bk: u32, bi: u32, lid: u32) -> vec2<u32> {
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
    let b = vec2<u32>(best_k[0], best_i[0]);
    workgroupBarrier();
    return b;
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
    for (var r = 0u; r < k; r++) {
        var bk = 0u;
        var bi = 0xffffffffu;
        for (var j = lid; j < n; j += WG) {
            if (above(keys[j], j, bk, bi)) {
                bk = keys[j];
                bi = j;
            }
        }
#if SUBGROUP
        let i = best(bk, bi, sg_id, n_sg, sg_lane).y;
#else
        let i = best(bk, bi, lid).y;
#endif
        if (lid == 0u) {
            src1[t_idx(1u, vec4<u32>(r, t, 0u, 0u))] = i32(i);
            picked[r] = prob[i];
        }
        // The owner of expert i takes it out of the next rounds.
        if (lid == i % WG) {
            keys[i] = 0u;
        }
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
