// RoPE (ggml_rope_ext, ggml_rope_multi) with YaRN and optional frequency factors. One
// invocation per pair slot of a row: slots below `pairs` = rot/2 rotate pair k (elements 2k,
// 2k+1 in the normal mode, k and k + pairs in the others: neox and the multi-section modes
// rotate n_dims elements, vision the whole head); the rest copy two of the unrotated elements
// rot.. through. MROPE reads the angle of pair k from the position section of its sector
// k mod Σsections (contiguous sections, or t/h/w interleaved with IMROPE); VISION restarts a
// section's angle at the sector where the section begins (ggml_mrope_cache_init).
// Bindings: src0 = x, src1 = positions (i32; 4 sections of n_tokens for MROPE), src2 =
// frequency factors, dst. PAIR (f32, normal and neox modes): a second tensor at the same
// positions in the same dispatch (q and k): src0 → src3 for the first op_u(8) items, src4 →
// dst (binding 5) for the rest. KV (with PAIR): the step's K and V rows go straight into the
// caches: the first op_u(8) items rotate q (src0 → src3), the next op_u(9) rotate k (src4)
// into the K cache (src7, f32 or f16) at row src5[token] (i32, or i64 as word pairs), and the
// rest copy two values each of v (src6, [kv_row, tokens]) into the V cache (dst) at the same
// rows; a k head h of a token lands at elements h·head_dim.. of its cache row.
// op_u: 0 = rot (rotated elements), 1 = slots per row, 8..11 = sections; op_f: 2 = freq_scale,
// 3 = ext_factor, 4 = attn_factor, 5 = corr low, 6 = corr high, 7 = theta_scale (the angles:
// `rope_angle.wgsl`).

#if MROPE
fn section_size(i: u32) -> u32 {
    return op_u(8u + i);
}

// The position section (0..3 = t, h, w, e) of a sector.
fn mrope_section(sector: u32) -> u32 {
#if IMROPE
    if (sector % 3u == 1u && sector < 3u * section_size(1u)) {
        return 1u;
    }
    if (sector % 3u == 2u && sector < 3u * section_size(2u)) {
        return 2u;
    }
    if (sector % 3u == 0u && sector < 3u * section_size(0u)) {
        return 0u;
    }
    return 3u;
#else
    var end = 0u;
    for (var i = 0u; i < 3u; i++) {
        end += section_size(i);
        if (sector < end) {
            return i;
        }
    }
    return 3u;
#endif
}

// The section whose angle restarts at a sector in the vision mode (4: none), first match wins.
fn vision_restart(sector: u32) -> u32 {
    var start = 0u;
    for (var i = 0u; i < 4u; i++) {
        if (sector == start) {
            return i;
        }
        start += section_size(i);
    }
    return 4u;
}
#endif

#if PAIR
// Whether this invocation works on the second tensor.
var<private> second: bool;

fn ldx(i: u32) -> f32 {
    if (second) {
        return src4[i];
    }
    return src0[i];
}

fn stx(i: u32, v: f32) {
    if (second) {
#if KV
        src7[i] = {{KT}}(v);
#else
        dst[i] = v;
#endif
    } else {
        src3[i] = v;
    }
}
#if KV
fn cache_row(token: u32) -> u32 {
    let i = t_idx(5u, vec4<u32>(token, 0u, 0u, 0u));
#if IDX_I64
    return src5[2u * i];
#else
    return u32(src5[i]);
#endif
}
#endif
#else
fn ldx(i: u32) -> f32 {
    return load_src0(i);
}

fn stx(i: u32, v: f32) {
    store_dst(i, v);
}
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let fall = linear_id(wid, nwg, lid);
    if (fall >= n_items()) {
        return;
    }
#if PAIR
#if KV
    if (fall >= op_u(8u) + op_u(9u)) {
        // Two values of v into the V cache.
        let fv = fall - op_u(8u) - op_u(9u);
        let half_row = (t_ne(6u, 0u) + 1u) / 2u;
        let token = fv / half_row;
        let e = 2u * (fv % half_row);
        let vi = t_idx(6u, vec4<u32>(e, token, 0u, 0u));
        let ci = t_idx(8u, vec4<u32>(e, cache_row(token), 0u, 0u));
        store_dst(ci, src6[vi]);
        if (e + 1u < t_ne(6u, 0u)) {
            store_dst(ci + t_nb(8u, 0u), src6[vi + t_nb(6u, 0u)]);
        }
        return;
    }
#endif
    second = fall >= op_u(8u);
    let f = select(fall, fall - op_u(8u), second);
    let xb = select(0u, 4u, second);
    let db = select(3u, 5u, second);
#else
    let f = fall;
    let xb = 0u;
    let db = 3u;
#endif
    let slots = op_u(1u);
    let row = f / slots;
    let k = f % slots;
    let n1 = t_ne(xb, 1u);
    let n2 = t_ne(xb, 2u);
    let r = vec4<u32>(0u, row % n1, (row / n1) % n2, row / (n1 * n2));
    let pairs = op_u(0u) / 2u;
    let ne0 = t_ne(xb, 0u);
    let src = t_idx(xb, r);
#if KV
    // k head r.y of token r.z: its place in the token's K cache row.
    let od = select(t_idx(db, r), t_idx(7u, vec4<u32>(r.y * ne0, cache_row(r.z), 0u, 0u)), second);
    let d0 = select(t_nb(db, 0u), t_nb(7u, 0u), second);
#else
    let od = t_idx(db, r);
    let d0 = t_nb(db, 0u);
#endif
    let s0 = t_nb(xb, 0u);
    if (k >= pairs) {
        let e = 2u * k;
        stx(od + e * d0, ldx(src + e * s0));
        if (e + 1u < ne0) {
            stx(od + (e + 1u) * d0, ldx(src + (e + 1u) * s0));
        }
        return;
    }
    // The angle as ggml builds it: the position times theta_scale once per earlier pair, in f32.
    let ts = op_f(7u);
#if MROPE
    let sectors = section_size(0u) + section_size(1u) + section_size(2u) + section_size(3u);
    let sec = mrope_section(k % sectors);
    let p = f32(src1[t_idx(1u, vec4<u32>(r.z + sec * n2, 0u, 0u, 0u))]);
    var theta = p;
    for (var i = 0u; i < k; i++) {
#if VISION
        if (vision_restart(i % sectors) == sec) {
            theta = p;
        }
#endif
        theta *= ts;
    }
#if VISION
    if (vision_restart(k % sectors) == sec) {
        theta = p;
    }
#endif
#else
    var theta = rope_theta(f32(src1[t_idx(1u, vec4<u32>(r.z, 0u, 0u, 0u))]), k, ts);
#endif
#if FREQ_FACTORS
    theta = theta / load_src2(t_idx(2u, vec4<u32>(k, 0u, 0u, 0u)));
#endif
    let cs = rope_yarn(theta, k, 2u);
#if NEOX
    let a = k;
    let b = k + pairs;
#else
    let a = 2u * k;
    let b = 2u * k + 1u;
#endif
    let x0 = ldx(src + a * s0);
    let x1 = ldx(src + b * s0);
    stx(od + a * d0, x0 * cs.x - x1 * cs.y);
    stx(od + b * d0, x0 * cs.y + x1 * cs.x);
}
