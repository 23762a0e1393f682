// ggml_flash_attn_ext, one workgroup per (head h, query i, batch b):
//   dst[:, h, i, b] = softmax_j(s_j) · V[:, j],  s_j = scale·q·k_j (then softcap·tanh(s_j /
//   softcap)) + slope_h·mask[j, i],
// with an optional per-head sink logit in the denominator only. Bindings: src0 = q [D, n_q,
// n_head, batch] f32, src1 = K [D, n_kv, n_head_kv, batch], src2 = V [DV, n_kv, n_head_kv,
// batch] (readers `k_*` / `v_*` from `flash_attn_kv.wgsl`), src3 = mask [n_kv, >= n_q, m2, m3],
// src4 = sinks [n_head], dst [DV, n_head, n_q, batch]; an absent mask or sink is bound to q and
// compiled out.
//
// The keys go in tiles of WG. Invocation t scores key t of the tile (a full dot product against q,
// which sits in workgroup memory); then every invocation folds the whole tile into the online
// softmax (m and l are the same in every invocation) and into its DVP output columns lid,
// lid + WG, ...: each V row is read across the invocations, coalesced. Keys whose mask is -inf are
// never read, so a cache's unwritten rows cannot leak NaN into the result. Workgroup memory is
// 4·(D + WG) bytes.
// op_f: 0 = scale (already divided by softcap when softcap != 0), 1 = max_bias, 2 = m0, 3 = m1,
// 5 = softcap; op_u: 4 = n_head_log2, 6 = n_head / K heads, 7 = n_head / V heads.
//
// SPLIT (flash decoding): the keys of a row are cut into op_u(9) splits of op_u(8) keys, one
// workgroup each (workgroup g·splits + s), so a decode step's few rows still fill the GPU. A split
// writes its unnormalized partial result (m, l, acc[DV]) to scratch (the dst binding) at
// (g·splits + s)·(DV + 2); `flash_attn_combine.wgsl` merges the splits and applies the sink.
// A split whose keys are all masked (the unwritten tail of a KV cache) reads no K or V.

const WG: u32 = {{WG}}u;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const DVP: u32 = {{DVP}}u;
// Below every real logit: the score of a masked key (mask entries are -inf or finite).
const NEG: f32 = -3.402823e38;

var<workgroup> qsh: array<f32, {{D}}>;
var<workgroup> sc: array<f32, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let gall = group_id(wid, nwg);
#if SPLIT
    let g = gall / op_u(9u);
    let kb = (gall % op_u(9u)) * op_u(8u);
#else
    let g = gall;
    let kb = 0u;
#endif
    if (g >= n_items()) {
        return;
    }
    let n_head = t_ne(0u, 2u);
    let n_q = t_ne(0u, 1u);
    let h = g % n_head;
    let iq = (g / n_head) % n_q;
    let b = g / (n_head * n_q);
#if SPLIT
    let n_kv = min(t_ne(1u, 1u), kb + op_u(8u));
#else
    let n_kv = t_ne(1u, 1u);
#endif
    for (var i = lid; i < D; i += WG) {
        qsh[i] = load_src0(t_idx(0u, vec4<u32>(i, iq, h, b)));
    }
    let krow0 = t_idx(1u, vec4<u32>(0u, 0u, h / op_u(6u), b));
    let knb1 = t_nb(1u, 1u);
    let vrow0 = t_idx(2u, vec4<u32>(0u, 0u, h / op_u(7u), b));
    let vnb1 = t_nb(2u, 1u);
#if MASK
    let mrow = t_idx(3u, vec4<u32>(0u, iq, h % t_ne(3u, 2u), b % t_ne(3u, 3u)));
    let mnb0 = t_nb(3u, 0u);
    let slope = alibi(h);
#endif
    let scale = op_f(0u);
    let softcap = op_f(5u);
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, DVP>;
    workgroupBarrier();
    for (var t0 = kb; t0 < n_kv; t0 += WG) {
        let cnt = min(WG, n_kv - t0);
        let ic = t0 + lid;
        var s = NEG;
        if (ic < n_kv) {
            var mv = 0.0;
#if MASK
            mv = slope * load_src3(mrow + ic * mnb0);
#endif
            if (mv >= NEG) {
                var x = k_dot(krow0 + ic * knb1) * scale;
                if (softcap != 0.0) {
                    // tanh is exactly ±1 in f32 beyond ±9.1; the clamp keeps exp-based tanh finite.
                    x = softcap * tanh(clamp(x, -10.0, 10.0));
                }
                s = x + mv;
            }
        }
        sc[lid] = s;
        workgroupBarrier();
        var mt = NEG;
        for (var i = 0u; i < cnt; i++) {
            mt = max(mt, sc[i]);
        }
        if (mt > NEG) {
            let m_new = max(m, mt);
            let alpha = exp(m - m_new);
            l *= alpha;
            for (var c = 0u; c < DVP; c++) {
                acc[c] *= alpha;
            }
            // Four keys at a time, their V loads in flight together; a masked key's row is
            // read (it lies inside the view) but selected away, so NaN in an unwritten cache
            // row cannot reach acc.
            var i = 0u;
            for (; i + 4u <= cnt; i += 4u) {
#unroll k 4
                let ok_$k = sc[i + $ku] > NEG;
                let p_$k = select(0.0, exp(sc[i + $ku] - m_new), ok_$k);
                let vrow_$k = vrow0 + (t0 + i + $ku) * vnb1;
#endunroll
                l += (p_0 + p_1) + (p_2 + p_3);
#unroll c DVP
                if (lid + $cu * WG < DV) {
#unroll k 4
                    let v_$k_$c = select(0.0, v_at(vrow_$k, lid + $cu * WG), ok_$k);
#endunroll
                    acc[$cu] += p_0 * v_0_$c + p_1 * v_1_$c + p_2 * v_2_$c + p_3 * v_3_$c;
                }
#endunroll
            }
            for (; i < cnt; i++) {
                let si = sc[i];
                if (si > NEG) {
                    let p = exp(si - m_new);
                    l += p;
                    let vrow = vrow0 + (t0 + i) * vnb1;
                    for (var c = 0u; c < DVP; c++) {
                        let j = lid + c * WG;
                        if (j < DV) {
                            acc[c] += p * v_at(vrow, j);
                        }
                    }
                }
            }
            m = m_new;
        }
        workgroupBarrier();
    }
#if SPLIT
    let base = t_off(5u) + gall * (DV + 2u);
    if (lid == 0u) {
        store_dst(base, m);
        store_dst(base + 1u, l);
    }
    for (var c = 0u; c < DVP; c++) {
        let j = lid + c * WG;
        if (j < DV) {
            store_dst(base + 2u + j, acc[c]);
        }
    }
#else
#if SINKS
    let sink = load_src4(t_idx(4u, vec4<u32>(h, 0u, 0u, 0u)));
    if (sink > m) {
        let ms = exp(m - sink);
        for (var c = 0u; c < DVP; c++) {
            acc[c] *= ms;
        }
        l = l * ms + 1.0;
    } else {
        l += exp(sink - m);
    }
#endif
    let inv = select(1.0 / l, 0.0, l == 0.0);
    for (var c = 0u; c < DVP; c++) {
        let j = lid + c * WG;
        if (j < DV) {
            store_dst(t_idx(5u, vec4<u32>(j, h, iq, b)), acc[c] * inv);
        }
    }
#endif
}
