// Row normalizations over dim 0, one workgroup per row (rows folded into a 2-d grid):
// RMS: x / sqrt(mean(x^2) + eps); NORM: (x - mean) / sqrt(var + eps); L2: x / max(|x|, eps).
// op_f(0) = eps. Partial sums reduce in workgroup memory.
// Each lane loads its first VPL values of the row (i = lid, lid + WG, ...) into registers at
// once (`#unroll`: the loads are all in flight together, where a loop waits for each one in
// turn) and keeps them for the second pass; values past VPL · WG (rows longer than the
// pipeline was made for) are streamed by plain loops.
// MUL_W (a fused ggml_mul by a row vector, the norm's weight): the result is multiplied by
// src1[i0]; dst is then binding 2.

#if MUL_W
const DST: u32 = 2u;

fn weight(i: u32) -> f32 {
    return load_src1(t_idx(1u, vec4<u32>(i, 0u, 0u, 0u)));
}
#else
const DST: u32 = 1u;

fn weight(i: u32) -> f32 {
    return 1.0;
}
#endif

const VPL: u32 = {{VPL}}u;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    let n1 = t_ne(0u, 1u);
    let n2 = t_ne(0u, 2u);
    let r = vec4<u32>(0u, row % n1, (row / n1) % n2, row / (n1 * n2));
    let valid = row < n_items();
    let n = select(0u, t_ne(0u, 0u), valid);
    let src = t_idx(0u, r);
    let od = t_idx(DST, r);
    let s0 = t_nb(0u, 0u);
    let d0 = t_nb(DST, 0u);
    let eps = op_f(0u);
    let nf = f32(t_ne(0u, 0u));
#unroll j VPL
    let i_$j = lid + $ju * WG;
    var v_$j = 0.0;
    if (i_$j < n) {
        v_$j = load_src0(src + i_$j * s0);
    }
#endunroll
    let rest = VPL * WG + lid;
#if NORM
    var acc = 0.0;
#unroll j VPL
    acc += v_$j;
#endunroll
    for (var i = rest; i < n; i += WG) {
        acc += load_src0(src + i * s0);
    }
    let mean = wg_sum(lid, acc) / nf;
    var sq = 0.0;
#unroll j VPL
    if (i_$j < n) {
        sq += (v_$j - mean) * (v_$j - mean);
    }
#endunroll
    for (var i = rest; i < n; i += WG) {
        let c = load_src0(src + i * s0) - mean;
        sq += c * c;
    }
    let scale = 1.0 / sqrt(wg_sum(lid, sq) / nf + eps);
    let shift = mean;
#else
    var sq = 0.0;
#unroll j VPL
    sq += v_$j * v_$j;
#endunroll
    for (var i = rest; i < n; i += WG) {
        let v = load_src0(src + i * s0);
        sq += v * v;
    }
    let total = wg_sum(lid, sq);
#if L2
    let scale = 1.0 / max(sqrt(total), eps);
#else
    let scale = 1.0 / sqrt(total / nf + eps);
#endif
    let shift = 0.0;
#endif
#unroll j VPL
    if (i_$j < n) {
        store_dst(od + i_$j * d0, (v_$j - shift) * scale * weight(i_$j));
    }
#endunroll
    for (var i = rest; i < n; i += WG) {
        store_dst(od + i * d0, (load_src0(src + i * s0) - shift) * scale * weight(i));
    }
}
