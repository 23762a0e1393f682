// Shared by every kernel: the parameter block and tensor descriptors.
//
// Each dispatch owns one slot of {{PARAM_VEC4S}} vec4 words of the parameter buffer, bound at
// binding 0. Words 12k..12k+11 describe storage binding k (binding k + 1): element offset from
// the start of the binding, extents ne[4], strides nb[4] (elements; bytes for block-quantized
// dtypes), 3 spare. Words {{OP_WORD}}.. are the op's own parameters, word {{ITEMS_WORD}} the
// number of work items (see `mod.rs`).
struct Params {
    w: array<vec4<u32>, {{PARAM_VEC4S}}>,
}

@group(0) @binding(0) var<uniform> P: Params;

fn pu(i: u32) -> u32 {
    return P.w[i >> 2u][i & 3u];
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(pu(i));
}

fn t_off(k: u32) -> u32 {
    return pu(12u * k);
}

fn t_ne(k: u32, d: u32) -> u32 {
    return pu(12u * k + 1u + d);
}

fn t_nb(k: u32, d: u32) -> u32 {
    return pu(12u * k + 5u + d);
}

// Element (or byte) index of `i` in binding k.
fn t_idx(k: u32, i: vec4<u32>) -> u32 {
    return t_off(k) + i.x * t_nb(k, 0u) + i.y * t_nb(k, 1u) + i.z * t_nb(k, 2u) + i.w * t_nb(k, 3u);
}

// The 4-d index of flat position `f` in binding k's extents (dim 0 fastest).
fn t_unflat(k: u32, f: u32) -> vec4<u32> {
    let n0 = t_ne(k, 0u);
    let n1 = t_ne(k, 1u);
    let n2 = t_ne(k, 2u);
    let i0 = f % n0;
    let r1 = f / n0;
    let i1 = r1 % n1;
    let r2 = r1 / n1;
    return vec4<u32>(i0, i1, r2 % n2, r2 / n2);
}

fn op_u(i: u32) -> u32 {
    return pu({{OP_WORD}}u + i);
}

fn op_f(i: u32) -> f32 {
    return pf({{OP_WORD}}u + i);
}

fn n_items() -> u32 {
    return pu({{ITEMS_WORD}}u);
}

// ALiBi slope of head h (1 without max_bias), from the op words softmax and flash attention
// share: op_f 1 = max_bias, 2 = m0, 3 = m1, op_u(4) = n_head_log2.
fn alibi(h: u32) -> f32 {
    if (op_f(1u) <= 0.0) {
        return 1.0;
    }
    let nl = op_u(4u);
    if (h < nl) {
        return pow(op_f(2u), f32(h + 1u));
    }
    return pow(op_f(3u), f32(2u * (h - nl) + 1u));
}

// Linear index of an invocation in a 2-d grid of {{WG}}-wide workgroups.
fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * {{WG}}u + lid;
}

// Linear index of a workgroup in a 2-d grid.
fn group_id(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}
