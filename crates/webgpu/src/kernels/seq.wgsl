// Sequence and convolution kernels, one invocation per output element (per system for
// SOLVE_TRI), f32 accumulation in the CPU reference's order.
// SSM_CONV (ggml_ssm_conv): src0 = conv_x [d_conv - 1 + n_t, d_inner, n_s], src1 = conv_w
//   [d_conv, d_inner]; dst[c, t, s] = sum_j src0[t + j, c, s] * src1[j, c].
// CONV_2D (ggml_conv_2d_direct): src0 = kernel [KW, KH, C_in, C_out], src1 = input [W, H, C_in,
//   N]; dst[ox, oy, co, n] = sum_{ci, ky, kx} kernel[kx, ky, ci, co] * input[x, y, ci, n] with
//   x = ox * s0 + kx * d0 - p0 (likewise y), taps in the padding skipped.
// IM2COL (ggml_im2col, 1-D seen as 2-D with one row): src0 = input [W, H, C, N];
//   dst[(c * KH + ky) * KW + kx, ox, oy, n] = input[x, y, c, n], zero in the padding.
// Convolutions: op_u 0..5 = s0, s1, p0, p1, d0, d1; IM2COL also 6..8 = KW, KH, C.
// SOLVE_TRI (ggml_solve_tri): src0 = A [n, n, b2, b3] (a[c, r] is row r, column c), src1 = B,
//   dst = X; one invocation per system (a column of X when left, a row otherwise) substitutes
//   in order. op_u 0 = left, 1 = lower, 2 = unit diagonal, 3 = systems per matrix. A zero pivot
//   gives inf or NaN (the CPU reference reports an error).

// Input coordinate of output o, tap k along axis `a`, or -1 in the padding.
fn tap(o: u32, k: u32, a: u32, len: u32) -> i32 {
    let i = i32(o * op_u(a) + k * op_u(4u + a)) - i32(op_u(2u + a));
    return select(-1, i, i >= 0 && i < i32(len));
}

#if SOLVE_TRI
// A's element at (row r, column c) of the system's orientation (transposed for right solves).
fn a_at(r: u32, c: u32, i2: u32, i3: u32) -> f32 {
    if (op_u(0u) == 1u) {
        return load_src0(t_idx(0u, vec4<u32>(c, r, i2, i3)));
    }
    return load_src0(t_idx(0u, vec4<u32>(r, c, i2, i3)));
}

// The 4-d index of element i of system j (column j when left, row j otherwise).
fn sys_index(k: u32, j: u32, i: u32, i2: u32, i3: u32) -> u32 {
    if (op_u(0u) == 1u) {
        return t_idx(k, vec4<u32>(j, i, i2, i3));
    }
    return t_idx(k, vec4<u32>(i, j, i2, i3));
}
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
#if SSM_CONV
    let o = t_unflat(2u, f);
    let c = o.x;
    let t = o.y;
    let s = o.z;
    var acc = 0.0;
    for (var j = 0u; j < t_ne(1u, 0u); j++) {
        acc += load_src0(t_idx(0u, vec4<u32>(t + j, c, s, 0u)))
            * load_src1(t_idx(1u, vec4<u32>(j, c, 0u, 0u)));
    }
    store_dst(t_idx(2u, o), acc);
#endif
#if CONV_2D
    let o = t_unflat(2u, f);
    var acc = 0.0;
    for (var ci = 0u; ci < t_ne(0u, 2u); ci++) {
        for (var ky = 0u; ky < t_ne(0u, 1u); ky++) {
            let y = tap(o.y, ky, 1u, t_ne(1u, 1u));
            if (y < 0) {
                continue;
            }
            for (var kx = 0u; kx < t_ne(0u, 0u); kx++) {
                let x = tap(o.x, kx, 0u, t_ne(1u, 0u));
                if (x >= 0) {
                    acc += load_src0(t_idx(0u, vec4<u32>(kx, ky, ci, o.z)))
                        * load_src1(t_idx(1u, vec4<u32>(u32(x), u32(y), ci, o.w)));
                }
            }
        }
    }
    store_dst(t_idx(2u, o), acc);
#endif
#if IM2COL
    let o = t_unflat(1u, f);
    let kw = op_u(6u);
    let kh = op_u(7u);
    let kx = o.x % kw;
    let ky = (o.x / kw) % kh;
    let c = o.x / (kw * kh);
    let x = tap(o.y, kx, 0u, t_ne(0u, 0u));
    let y = tap(o.z, ky, 1u, t_ne(0u, 1u));
    var v = 0.0;
    if (x >= 0 && y >= 0) {
        v = load_src0(t_idx(0u, vec4<u32>(u32(x), u32(y), c, o.w)));
    }
    store_dst(t_idx(1u, o), v);
#endif
#if SOLVE_TRI
    let systems = op_u(3u);
    let j = f % systems;
    let batch = f / systems;
    let i2 = batch % t_ne(0u, 2u);
    let i3 = batch / t_ne(0u, 2u);
    let n = t_ne(0u, 0u);
    // Forward substitution when the triangle read is the lower one of the oriented system.
    let forward = (op_u(1u) == 1u) == (op_u(0u) == 1u);
    for (var step = 0u; step < n; step++) {
        let i = select(n - 1u - step, step, forward);
        var s = load_src1(sys_index(1u, j, i, i2, i3));
        if (forward) {
            for (var t = 0u; t < i; t++) {
                s -= a_at(i, t, i2, i3) * dst[sys_index(2u, j, t, i2, i3)];
            }
        } else {
            for (var t = i + 1u; t < n; t++) {
                s -= a_at(i, t, i2, i3) * dst[sys_index(2u, j, t, i2, i3)];
            }
        }
        let diag = select(a_at(i, i, i2, i3), 1.0, op_u(2u) == 1u);
        store_dst(sys_index(2u, j, i, i2, i3), s / diag);
    }
#endif
}
