// SAMPLE: one token drawn per row from its top-k candidates (llama.cpp's default sampler chain:
// top-k, top-p, min-p, temperature, a uniform draw), one workgroup per row. src0: the
// candidates' f32 logits, largest first; src1: their i32 ids; src2: the row's parameters
// (r, temperature, top_p, min_p, top_k); dst: the drawn id.
//
// The invocations load the candidates and compute the exps in parallel into workgroup memory;
// invocation 0 runs every sum, cut and the draw serially, in candidate order and in the host
// sampler's arithmetic (p = e / s, then running sums of p), so the kernel is deterministic and
// differs from the CPU reference only by exp and division rounding.

const WG: u32 = {{WG}}u;
const MAX_K: u32 = {{MAX_K}}u;

var<workgroup> vals: array<f32, {{MAX_K}}>;
var<workgroup> ex: array<f32, {{MAX_K}}>;
// Invocation 0's cut and maximum, for the second round of exps.
var<workgroup> kept: u32;
var<workgroup> top: f32;

fn at(k: u32, i: u32, row: u32) -> u32 {
    return t_idx(k, vec4<u32>(i, row, 0u, 0u));
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    let valid = row < n_items();
    let k = select(0u, min(t_ne(0u, 0u), MAX_K), valid);
    let r = load_src2(at(2u, 0u, row));
    let temp = load_src2(at(2u, 1u, row));
    let top_p = load_src2(at(2u, 2u, row));
    let min_p = load_src2(at(2u, 3u, row));
    let top_k = u32(max(load_src2(at(2u, 4u, row)), 0.0));
    let n = select(k, min(top_k, k), top_k > 0u);
    let sampled = temp > 0.0 && n > 1u;

    for (var i = lid; i < n; i += WG) {
        vals[i] = load_src0(at(0u, i, row));
    }
    workgroupBarrier();
    if (lid == 0u) {
        var m = -3.402823e38;
        for (var i = 0u; i < n; i++) {
            m = max(m, vals[i]);
        }
        top = m;
    }
    workgroupBarrier();
    let m = top;
    for (var i = lid; i < n; i += WG) {
        ex[i] = exp(vals[i] - m);
    }
    workgroupBarrier();
    if (lid == 0u) {
        var s = 0.0;
        for (var i = 0u; i < n; i++) {
            s += ex[i];
        }
        var keep = n;
        if (top_p < 1.0) {
            var acc = 0.0;
            for (var i = 0u; i < n; i++) {
                acc += ex[i] / s;
                if (acc >= top_p) {
                    keep = i + 1u;
                    break;
                }
            }
        }
        if (min_p > 0.0 && n > 0u) {
            let lo = ex[0] / s * min_p;
            var c = 0u;
            while (c < n && ex[c] / s >= lo) {
                c++;
            }
            keep = min(keep, max(c, 1u));
        }
        keep = max(keep, 1u);
        // The kept maximum, subtracted before the division by the temperature (as
        // SampleParams::pick does): a tiny temperature would overflow vals / temp.
        var m2 = -3.402823e38;
        for (var i = 0u; i < keep; i++) {
            m2 = max(m2, vals[i]);
        }
        kept = keep;
        top = m2;
    }
    workgroupBarrier();
    let keep = select(0u, kept, sampled);
    let m2 = top;
    for (var i = lid; i < keep; i += WG) {
        ex[i] = exp((vals[i] - m2) / temp);
    }
    workgroupBarrier();
    if (valid && lid == 0u) {
        var pick = 0u;
        if (sampled) {
            pick = keep - 1u;
            var s = 0.0;
            for (var i = 0u; i < keep; i++) {
                s += ex[i];
            }
            var acc = 0.0;
            for (var i = 0u; i < keep; i++) {
                acc += ex[i] / s;
                if (r < acc) {
                    pick = i;
                    break;
                }
            }
        }
        dst[t_idx(3u, vec4<u32>(row, 0u, 0u, 0u))] = src1[at(1u, pick, row)];
    }
}
