// Row normalizations over dim 0, one workgroup per row (rows folded into a 2-d grid):
// RMS: x / sqrt(mean(x^2) + eps); NORM: (x - mean) / sqrt(var + eps); L2: x / max(|x|, eps).
// op_f(0) = eps. Partial sums reduce in workgroup memory.
// Each lane loads its first VPL values of the row (i = lid, lid + WG, ...) into registers at
// once (`#unroll`: the loads are all in flight together, where a loop waits for each one in
// turn) and keeps them for the second pass; values past VPL · WG (rows longer than the
// pipeline was made for) are streamed by plain loops.
// MUL_W (a fused ggml_mul by a row vector, the norm's weight): the result is multiplied by
// src1[i0]; dst is then binding 2.
// PAIR (with MUL_W: two norms × weights of one kind and eps in one dispatch, e.g. a layer's
// q and k norms; see ops/fuse.rs): src0 and src1 are the first's input and weight, src2 and
// src3 the second's, src4 the first's result and dst (binding 5) the second's; the workgroups
// take the first's rows (op_u(1) of them), then the second's.

#if PAIR
// Whether this workgroup's row is the second norm's; the bindings it reads and writes.
var<private> second: bool;

fn x_slot() -> u32 {
    return select(0u, 2u, second);
}

fn out_slot() -> u32 {
    return select(4u, 5u, second);
}

fn x_at(i: u32) -> f32 {
    if (second) {
        return load_src2(i);
    }
    return load_src0(i);
}

fn weight(i: u32) -> f32 {
    if (second) {
        return load_src3(t_idx(3u, vec4<u32>(i, 0u, 0u, 0u)));
    }
    return load_src1(t_idx(1u, vec4<u32>(i, 0u, 0u, 0u)));
}

fn put(i: u32, v: f32) {
    if (second) {
        store_dst(i, v);
    } else {
        src4[i] = v;
    }
}
#else
fn x_slot() -> u32 {
    return 0u;
}

fn x_at(i: u32) -> f32 {
    return load_src0(i);
}

fn put(i: u32, v: f32) {
    store_dst(i, v);
}

#if MUL_W
fn out_slot() -> u32 {
    return 2u;
}

fn weight(i: u32) -> f32 {
    return load_src1(t_idx(1u, vec4<u32>(i, 0u, 0u, 0u)));
}
#else
fn out_slot() -> u32 {
    return 1u;
}

fn weight(i: u32) -> f32 {
    return 1.0;
}
#endif
#endif

const VPL: u32 = {{VPL}}u;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    var row = group_id(wid, nwg);
#if PAIR
    second = row >= op_u(1u);
    row -= select(0u, op_u(1u), second);
    let valid = !second || row < n_items() - op_u(1u);
#else
    let valid = row < n_items();
#endif
    let xs = x_slot();
    let ds = out_slot();
    let n1 = t_ne(xs, 1u);
    let n2 = t_ne(xs, 2u);
    let r = vec4<u32>(0u, row % n1, (row / n1) % n2, row / (n1 * n2));
    let n = select(0u, t_ne(xs, 0u), valid);
    let src = t_idx(xs, r);
    let od = t_idx(ds, r);
    let s0 = t_nb(xs, 0u);
    let d0 = t_nb(ds, 0u);
    let eps = op_f(0u);
    let nf = f32(t_ne(xs, 0u));
#unroll j VPL
    let i_$j = lid + $ju * WG;
    var v_$j = 0.0;
    if (i_$j < n) {
        v_$j = x_at(src + i_$j * s0);
    }
#endunroll
    let rest = VPL * WG + lid;
#if NORM
    var acc = 0.0;
#unroll j VPL
    acc += v_$j;
#endunroll
    for (var i = rest; i < n; i += WG) {
        acc += x_at(src + i * s0);
    }
    let mean = wg_sum(lid, acc) / nf;
    var sq = 0.0;
#unroll j VPL
    if (i_$j < n) {
        sq += (v_$j - mean) * (v_$j - mean);
    }
#endunroll
    for (var i = rest; i < n; i += WG) {
        let c = x_at(src + i * s0) - mean;
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
        let v = x_at(src + i * s0);
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
        put(od + i_$j * d0, (v_$j - shift) * scale * weight(i_$j));
    }
#endunroll
    for (var i = rest; i < n; i += WG) {
        put(od + i * d0, (x_at(src + i * s0) - shift) * scale * weight(i));
    }
}
