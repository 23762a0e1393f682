// Recurrent scans over the tokens of a sequence, one workgroup per (channel block or head,
// sequence), f32 throughout, in the CPU reference's order within each invocation.
//
// SSM_SCAN (ggml_ssm_scan, Mamba-1 and Mamba-2): src0 = states [d_state, head_dim, n_head, n_rs],
//   src1 = x [head_dim, n_head, n_tokens, n_seqs], src2 = dt [n_head, n_tokens, n_seqs],
//   src3 = A [d_state or 1, n_head], src4 = B, src5 = C [d_state, n_group, n_tokens, n_seqs],
//   src6 = ids (i32 [n_seqs]), dst = y (x's extents, flattened) then the final states. One
//   invocation per channel (head, row i of the head); its state row of d_state values lives in
//   dst's state region, which only that invocation touches. op_u: 0 = head_dim, 1 = n_head,
//   2 = d_state, 3 = n_tokens, 4 = heads per group, 5 = length of y, 6 = n_rs. Sequence
//   `wid.z`. An id outside 0..n_rs starts from zeros (the CPU reference reports an error).
// GATED_DELTA_NET (ggml_gated_delta_net): src0 = q, src1 = k [S, H_k, n_tokens, n_seqs_k],
//   src2 = v [S, H, n_tokens, n_seqs], src3 = g [1 or S, H, n_tokens, n_seqs], src4 = beta
//   [1, H, n_tokens, n_seqs], src5 = state (S·S per head and sequence, M[i][j] at j·S + i),
//   dst = the outputs [S, H, n_tokens, n_seqs] then the final states. Workgroups of {{WG}} = S
//   invocations; invocation j keeps column j of M in registers (`m[i]` = M[i][j]), so every
//   step of the rule is its own: decay, delta_j = (v_j - Σ_i m[i]·k_i)·beta, m += k·delta_j,
//   o_j = Σ_i m[i]·q_i / sqrt(S). k, q and the per-row decays are staged in workgroup memory.
//   op_u: 0 = H, 1 = n_tokens, 2 = n_seqs, 3 = g per key row, 4 = H_q, 5 = H_k, 6 = sequences
//   per q sequence, 7 = sequences per k sequence. Head `group_id`, sequence `wid.z`.

#if SSM_SCAN
// ggml_softplus: log(1 + e^x), exactly x above 20.
fn softplus(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return log(1.0 + exp(x));
}

// Element `f` of dst, contiguous.
fn dst_at(f: u32) -> u32 {
    return t_off(7u) + f * t_nb(7u, 0u);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let head_dim = op_u(0u);
    let n_head = op_u(1u);
    let d_state = op_u(2u);
    let ch = group_id(wid, nwg) * {{WG}}u + lid;
    if (ch >= head_dim * n_head) {
        return;
    }
    let seq = wid.z;
    let h = ch / head_dim;
    let i = ch % head_dim;
    let g = h / op_u(4u);
    let id = src6[t_idx(6u, vec4<u32>(seq, 0u, 0u, 0u))];
    let valid = id >= 0 && u32(id) < op_u(6u);
    let st = op_u(5u) + ((seq * n_head + h) * head_dim + i) * d_state;
    for (var j = 0u; j < d_state; j++) {
        var v = 0.0;
        if (valid) {
            v = load_src0(t_idx(0u, vec4<u32>(j, i, h, u32(id))));
        }
        dst[dst_at(st + j)] = v;
    }
    let per_state = t_ne(3u, 0u) != 1u;
    for (var t = 0u; t < op_u(3u); t++) {
        let dtp = softplus(load_src2(t_idx(2u, vec4<u32>(h, t, seq, 0u))));
        let x_dt = load_src1(t_idx(1u, vec4<u32>(i, h, t, seq))) * dtp;
        var acc = 0.0;
        for (var j = 0u; j < d_state; j++) {
            let a = load_src3(t_idx(3u, vec4<u32>(select(0u, j, per_state), h, 0u, 0u)));
            let s = dst[dst_at(st + j)] * exp(dtp * a)
                + load_src4(t_idx(4u, vec4<u32>(j, g, t, seq))) * x_dt;
            dst[dst_at(st + j)] = s;
            acc += s * load_src5(t_idx(5u, vec4<u32>(j, g, t, seq)));
        }
        dst[dst_at(i + head_dim * (h + n_head * (t + op_u(3u) * seq)))] = acc;
    }
}
#endif

#if GATED_DELTA_NET
var<workgroup> sk: array<f32, {{WG}}>;
var<workgroup> sq: array<f32, {{WG}}>;
var<workgroup> sdecay: array<f32, {{WG}}>;

// Flat element `f` of binding `b` through its extents and strides.
fn flat(b: u32, f: u32) -> u32 {
    return t_idx(b, t_unflat(b, f));
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let s = {{WG}}u;
    let n_head = op_u(0u);
    let n_tokens = op_u(1u);
    let h = group_id(wid, nwg);
    let seq = wid.z;
    let j = lid;
    let hq = h % op_u(4u);
    let hk = h % op_u(5u);
    let seq_q = seq / op_u(6u);
    let seq_k = seq / op_u(7u);
    let per_row = op_u(3u) == 1u;
    let task = seq * n_head + h;
    var m: array<f32, {{WG}}>;
    for (var i = 0u; i < s; i++) {
        m[i] = load_src5(flat(5u, (task * s + j) * s + i));
    }
    let scale = 1.0 / sqrt(f32(s));
    for (var t = 0u; t < n_tokens; t++) {
        workgroupBarrier();
        sk[j] = load_src1(t_idx(1u, vec4<u32>(j, hk, t, seq_k)));
        sq[j] = load_src0(t_idx(0u, vec4<u32>(j, hq, t, seq_q)));
        if (per_row) {
            sdecay[j] = exp(load_src3(t_idx(3u, vec4<u32>(j, h, t, seq))));
        }
        workgroupBarrier();
        var decay = 0.0;
        if (!per_row) {
            decay = exp(load_src3(t_idx(3u, vec4<u32>(0u, h, t, seq))));
        }
        var kv = 0.0;
        for (var i = 0u; i < s; i++) {
            m[i] *= select(decay, sdecay[i], per_row);
            kv += m[i] * sk[i];
        }
        let beta = load_src4(t_idx(4u, vec4<u32>(0u, h, t, seq)));
        let delta = (load_src2(t_idx(2u, vec4<u32>(j, h, t, seq))) - kv) * beta;
        var o = 0.0;
        for (var i = 0u; i < s; i++) {
            m[i] += sk[i] * delta;
            o += m[i] * sq[i];
        }
        store_dst(flat(6u, ((seq * n_tokens + t) * n_head + h) * s + j), o * scale);
    }
    let states_at = s * n_head * n_tokens * op_u(2u);
    for (var i = 0u; i < s; i++) {
        store_dst(flat(6u, states_at + (task * s + j) * s + i), m[i]);
    }
}
#endif
