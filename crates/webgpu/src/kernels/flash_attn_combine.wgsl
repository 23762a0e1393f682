// Merges the split-K partial results of `flash_attn.wgsl` / `flash_attn_vec.wgsl` (SPLIT): one
// workgroup per row g = h + n_head·(iq + n_q·b) and chunk of COLS output columns. Partial s of
// row g sits in src0 (scratch) at (g·splits + s)·(DV + 2) as (m_s, l_s, acc_s[DV]); the result
// is sum_s acc_s·e^(m_s - M) / sum_s l_s·e^(m_s - M) with M the largest m_s, and the optional
// sink logit (src1) in the denominator only, as the unsplit kernels do. A row whose keys were
// all masked has l = 0 and gets zeros.
// Every invocation takes a few splits at once (loads in flight together, no loop of dependent
// round trips): the maximum and the weights through `wg_reduce.wgsl`, then invocation t sums
// column t % COLS over the splits t / COLS, t / COLS + WG / COLS, ..., and the WG / COLS
// partial sums of a column are added in workgroup memory.
// op_u: 0 = n_head, 1 = n_q, 2 = splits (at most {{MAX_SPLITS}}). dst is [DV, n_head, n_q, batch].

const DV: u32 = {{DV}}u;
const COLS: u32 = {{COLS}}u;
const SL: u32 = WG / COLS;
const NEG: f32 = -3.402823e38;

var<workgroup> ws: array<f32, {{MAX_SPLITS}}>;
var<workgroup> part: array<f32, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let chunks = (DV + COLS - 1u) / COLS;
    let gc = group_id(wid, nwg);
    let g = gc / chunks;
    if (g >= n_items()) {
        return;
    }
    let c0 = (gc % chunks) * COLS;
    let n_head = op_u(0u);
    let n_q = op_u(1u);
    let splits = op_u(2u);
    let h = g % n_head;
    let iq = (g / n_head) % n_q;
    let b = g / (n_head * n_q);
    let row = t_off(0u) + g * splits * (DV + 2u);
    var mx = NEG;
    for (var s = lid; s < splits; s += WG) {
        mx = max(mx, load_src0(row + s * (DV + 2u)));
    }
    let m = wg_max(lid, mx);
    var ls = 0.0;
    for (var s = lid; s < splits; s += WG) {
        let p = row + s * (DV + 2u);
        let w = exp(load_src0(p) - m);
        ws[s] = w;
        ls += load_src0(p + 1u) * w;
    }
    var l = wg_sum(lid, ls);
    var scale_out = 1.0;
#if SINKS
    let sink = load_src1(t_idx(1u, vec4<u32>(h, 0u, 0u, 0u)));
    if (sink > m) {
        scale_out = exp(m - sink);
        l = l * scale_out + 1.0;
    } else {
        l += exp(sink - m);
    }
#endif
    let inv = select(scale_out / l, 0.0, l == 0.0);
    let c = c0 + lid % COLS;
    var o = 0.0;
    if (c < DV) {
        var s = lid / COLS;
        for (; s + 3u * SL < splits; s += 4u * SL) {
#unroll k 4
            let a_$k = load_src0(row + (s + $ku * SL) * (DV + 2u) + 2u + c) * ws[s + $ku * SL];
#endunroll
            o += (a_0 + a_1) + (a_2 + a_3);
        }
        for (; s < splits; s += SL) {
            o += load_src0(row + s * (DV + 2u) + 2u + c) * ws[s];
        }
    }
    part[lid] = o;
    workgroupBarrier();
    if (lid < COLS && c < DV) {
        var t = 0.0;
        for (var k = 0u; k < SL; k++) {
            t += part[k * COLS + lid];
        }
        store_dst(t_idx(2u, vec4<u32>(c, h, iq, b)), t * inv);
    }
}
