// Merges the split-K partial results of `flash_attn.wgsl` (SPLIT): one workgroup per row
// g = h + n_head·(iq + n_q·b). Partial s of row g sits in src0 (scratch) at (g·splits + s)·(DV + 2)
// as (m_s, l_s, acc_s[DV]); the result is sum_s acc_s·e^(m_s - M) / sum_s l_s·e^(m_s - M) with
// M the largest m_s, and the optional sink logit (src1) in the denominator only, as the unsplit
// kernel does. A row whose keys were all masked has l = 0 and gets zeros.
// op_u: 0 = n_head, 1 = n_q, 2 = splits. dst is [DV, n_head, n_q, batch].

const WG: u32 = {{WG}}u;
const DV: u32 = {{DV}}u;
const NEG: f32 = -3.402823e38;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    if (g >= n_items()) {
        return;
    }
    let n_head = op_u(0u);
    let n_q = op_u(1u);
    let splits = op_u(2u);
    let h = g % n_head;
    let iq = (g / n_head) % n_q;
    let b = g / (n_head * n_q);
    let row = t_off(0u) + g * splits * (DV + 2u);
    var m = NEG;
    for (var s = 0u; s < splits; s++) {
        m = max(m, load_src0(row + s * (DV + 2u)));
    }
    var l = 0.0;
    for (var s = 0u; s < splits; s++) {
        let p = row + s * (DV + 2u);
        l += load_src0(p + 1u) * exp(load_src0(p) - m);
    }
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
    for (var j = lid; j < DV; j += WG) {
        var o = 0.0;
        for (var s = 0u; s < splits; s++) {
            let p = row + s * (DV + 2u);
            o += load_src0(p + 2u + j) * exp(load_src0(p) - m);
        }
        store_dst(t_idx(2u, vec4<u32>(j, h, iq, b)), o * inv);
    }
}
