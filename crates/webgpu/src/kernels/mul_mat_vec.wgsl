// Matrix × a few vectors (decode): dst[m, n, i2, i3] = sum_k src0[k, m, a2, a3] * src1[k, n, i2, i3]
// for N <= NC activation columns, accumulated in f32. Each weight row is read once for all
// columns, decoded in registers by `part` (quant_part.wgsl): four lanes share a unit of 32
// values, eight each, so the lanes of a subgroup read neighbouring bytes.
// A workgroup computes RPW consecutive rows: lane t takes part t % 4 of units t / 4,
// t / 4 + WG / 4, ... of every one of them, so RPW loads are in flight per lane and the eight
// activation values of a part are loaded once (into registers) for all RPW rows; integer formats
// load their parts undecoded (`partq`) and apply each part's offset once, through the sum of its
// activations (`dotw`). With Q8X
// (int8 activations from `quant_act.wgsl`) a lane takes whole units instead, see below. Then the
// lanes reduce the RPW·NC (·2 for GLU) sums through workgroup memory in at most three barriers
// (below; subgroup operations were slower).
// src1 is bound as vec4s: its offset and column stride are whole vec4s (the planner checks);
// with Q8X, vec4<u32>s of `quant_act.wgsl`'s quants, scales (and sums of h² with NORM: g was
// applied there, only the scale is left), and no batches.
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2 (src1.ne2 / src0.ne2), 4 = r3. Workgroup z indexes the batch.
// Fused epilogues:
// ADD: dst (binding 3) = product + src2, a residual of the product's shape.
// ID (ggml_mul_mat_id, one column a workgroup, NC = 1): workgroup z is column e + n_used · t
//   of dst [M, n_used, tokens]; its weight is expert ids[e, t] of src0 (dim 2; src2 the i32
//   ids [n_used, tokens]) and its activations column e % src1.ne1 of token t. An id outside
//   the experts reads expert 0 and stores NaN. With Q8X the activations' columns were rounded
//   as one [K, ne1 · tokens] matrix: op_u(5) = ne1, op_u(6) = ne1 · tokens. With GLU (IdGlu)
//   src2 holds the up experts and the ids are src3 (binding IDS).
// GLU: a second weight src2 of src0's shape and dtype; dst (binding 3) = EXPR(x, g) with x the
//   product with src0 (the gate) and g the one with src2 (the up projection), as `glu.wgsl`.
// QKV: three weights of one dtype and row length, src0 (op_u(1) rows), src2 (op_u(5)) and src3
//   (op_u(6)), into bindings OQ, OK and dst: the workgroups cover src0's rows, then src2's, then
//   src3's, each reading only its own weight (no batches).
// ROPE (with QKV): the step's attention input whole. q and k are rotated (rope_angle.wgsl; NEOX
//   pairs j, j + rot/2, else 2j, 2j + 1; FREQ_FACTORS at binding FF) at the positions of binding
//   P (i32, one per column), q stored to OQ ([head_dim, heads, columns]), k and v to the K cache
//   (OK) and the V cache (dst), f32 or f16 rows [head_dim · heads, ctx], at the row binding S
//   gives each column (i32, or i64 as word pairs with IDX_I64). A pair's two rows are reduced
//   by one workgroup: local row r < RPW / 2 is element a of pair m0 / 2 + r, row r + RPW / 2
//   its element b (pairs past rot / 2 are neighbours copied through). op_u(8) = rot; op_f(9..13)
//   = freq_scale, ext_factor, attn_factor, corr low, corr high; op_f(14) = theta_scale.
// Fused prologue, with any epilogue:
// NORM: src1 is h, and the products are of rms_norm(h) · g (a fused ggml_rms_norm and ggml_mul
//   by the f32 row g at binding G, bound as vec4s; eps = op_f(7)): the lanes multiply each part
//   of h by g and also sum h², which the workgroup reduces with the products; each result is
//   scaled by 1 / sqrt(mean(h²) + eps). The lanes of a workgroup cover every part of h once.
// Bindings: src0, src1, [src2 (ADD, GLU) | src2, src3 (QKV)], [g (NORM)], [P, FF, S (ROPE)],
// [OQ, OK (QKV)], dst (binding D).

const NC: u32 = {{NC}}u;
const RPW: u32 = {{RPW}}u;
const WG: u32 = {{WG}}u;
// Lanes a sum of the reduction (a power of two, at most 8 and at most WG / NSUM, at least 1).
const RL: u32 = {{RL}}u;

#if GLU
const NW: u32 = 2u;
#else
const NW: u32 = 1u;
#endif
// Sums per lane: (weight, row, column), then with NORM one sum of h² per column.
const NS: u32 = NW * RPW * NC;
#if NORM
const NSUM: u32 = NS + NC;
#else
const NSUM: u32 = NS;
#endif

var<workgroup> red: array<f32, {{RED}}>;
// Which weight `part` decodes: 0 = src0, 1 = src2.
var<private> wsel: u32;

#if WV4
// The weights bound as vec4<u32> (WV4: rows on 16-byte boundaries), so a decoder's four
// aligned words are one load (`ld4`).
fn ldv(i: u32) -> vec4<u32> {
#else
fn ldw(i: u32) -> u32 {
#endif
#if GLU
    if (wsel == 1u) {
        return src2[i];
    }
#endif
#if QKV
    if (wsel == 1u) {
        return src2[i];
    }
    if (wsel == 2u) {
        return src3[i];
    }
#endif
    return src0[i];
}

#if WV4
fn ldw(i: u32) -> u32 {
    return ldv(i >> 2u)[i & 3u];
}

// Words i .. i + 3 of the weight, for an i that is a multiple of 4.
fn ld4(i: u32) -> vec4<u32> {
    return ldv(i >> 2u);
}
#else
fn ld4(i: u32) -> vec4<u32> {
    return vec4<u32>(ldw(i), ldw(i + 1u), ldw(i + 2u), ldw(i + 3u));
}
#endif

fn dot2(w: array<vec4<f32>, 2>, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
    return dot(w[0], x0) + dot(w[1], x1);
}

#if U_INTQ
// Integer weights with f32 activations: d · (q · x) + m · Σx, the offset m applied once per
// part (through the activations' sum) instead of once per value.
struct XS {
    a: vec4<f32>,
    b: vec4<f32>,
    sum: f32,
}

fn dotw(w: PartQ, x: XS) -> f32 {
    return w.d * (dot(bytes_i(w.qa), x.a) + dot(bytes_i(w.qb), x.b)) + w.m * x.sum;
}
#endif

#if Q8X
// Q8X (quantized weights): src1 holds the activations rounded to int8 per unit of 32 with one
// scale each (`quant_act.wgsl`'s layout, bound as vec4<u32>), and a lane takes whole units, all
// four parts: each row's part is two dot4I8Packed of its undecoded quants, its offset m applied
// through the part's sum of activation quants. Integer dot products instead of eight decoded
// floats per part and row, and a lane's loads cover a whole block.
const LPU: u32 = 1u;

// Word i (0..7) of a unit's quants held as two vec4s.
fn xword(a: vec4<u32>, b: vec4<u32>, i: u32) -> u32 {
    return select(b[i & 3u], a[i & 3u], i < 4u);
}

// Part p's sum of activation quants and its dot product with the weight part w, scaled.
fn dotq(w: PartQ, qa: u32, qb: u32, xs: i32) -> f32 {
    return w.d * f32(dot4I8Packed(w.qa, qa) + dot4I8Packed(w.qb, qb)) + w.m * f32(xs);
}

// Unit u of column c of the rounded activations: its quants (values 0..15 in a, 16..31 in b),
// its scale and, with NORM, its sum of h².
struct XU {
    a: vec4<u32>,
    b: vec4<u32>,
    d: f32,
    ss: f32,
}

fn xunit(c: u32, u: u32, units: u32, n_cols: u32) -> XU {
    let o = t_off(1u) / 4u + 2u * (c * units + u);
    let dq0 = t_off(1u) + 8u * n_cols * units;
    let dw = dq0 + c * units + u;
    var ss = 0.0;
#if NORM
    let sw = dq0 + (n_cols + c) * units + u;
    ss = bitcast<f32>(src1[sw / 4u][sw % 4u]);
#endif
    return XU(src1[o], src1[o + 1u], bitcast<f32>(src1[dw / 4u][dw % 4u]), ss);
}

#if JOB
// Q8X with jobs (the K formats, `jobq` in quant_part.wgsl): a lane takes job j of every row, UPJ
// units (`job_unit`) whose quants share their bytes, so one lane loads those bytes once, in
// whole words (and with WV4, 16-byte loads: q4_K's head and quants are three a job). Each
// half unit of 16 values has its scale and offset.
fn dot16(w: vec4<u32>, x: vec4<u32>) -> i32 {
    return dot4I8Packed(w.x, x.x) + dot4I8Packed(w.y, x.y) + dot4I8Packed(w.z, x.z)
        + dot4I8Packed(w.w, x.w);
}

// The sums of the activation quants of the halves of x.
fn xsums(x: XU) -> vec2<f32> {
    let one = vec4<u32>(0x01010101u);
    return vec2<f32>(f32(dot16(x.a, one)), f32(dot16(x.b, one)));
}

// Unit k of job w times the activation unit x (its half sums xs), before x's scale.
fn jdot(w: JobQ, k: u32, x: XU, xs: vec2<f32>) -> f32 {
    let h = 2u * k;
    return w.d[h] * f32(dot16(w.w[h], x.a)) + w.m[h] * xs.x
        + w.d[h + 1u] * f32(dot16(w.w[h + 1u], x.b)) + w.m[h + 1u] * xs.y;
}
#endif
#else
// Lanes per unit: four, each decoding one part.
const LPU: u32 = 4u;
#endif

#if ROPE
// Element of pair j of a head on side s (0: a, 1: b).
fn pair_elem(j: u32, s: u32) -> u32 {
#if NEOX
    let half = op_u(8u) / 2u;
    if (j < half) {
        return j + s * half;
    }
#endif
    return 2u * j + s;
}

// The pair of local row r (its index among the weight's pairs, clamped to the last).
fn rope_pair(m0: u32, r: u32, m_len: u32) -> u32 {
    return min(m0 / 2u + r % (RPW / 2u), m_len / 2u - 1u);
}

// The weight row a workgroup's local row r reads: paired for q and k (wsel 0, 1), consecutive
// for v; rows past the end repeat a valid one.
fn rope_row(m0: u32, r: u32, m_len: u32) -> u32 {
    if (wsel == 2u) {
        return min(m0 + r, m_len - 1u);
    }
    let hh = t_ne({{OQ}}u, 0u) / 2u;
    let p = rope_pair(m0, r, m_len);
    return (p / hh) * 2u * hh + pair_elem(p % hh, r / (RPW / 2u));
}

fn rope_ok(m0: u32, r: u32, m_len: u32) -> bool {
    if (wsel == 2u) {
        return m0 + r < m_len;
    }
    return m0 / 2u + r % (RPW / 2u) < m_len / 2u;
}

// The cache row of column c.
fn cache_row(c: u32) -> u32 {
    let i = t_idx({{S}}u, vec4<u32>(c, 0u, 0u, 0u));
#if IDX_I64
    return u32(src{{S}}[2u * i]);
#else
    return u32(src{{S}}[i]);
#endif
}
#endif

// Rows, columns and sums are unrolled by hand (`#unroll`) into plain registers.
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
#if QKV
    // Which weight this workgroup reads: its groups come after those of the ones before.
    let g = group_id(wid, nwg);
    let gq = (op_u(1u) + RPW - 1u) / RPW;
    let gk = (op_u(5u) + RPW - 1u) / RPW;
    wsel = select(select(2u, 1u, g < gq + gk), 0u, g < gq);
    let m0 = (g - select(select(gq + gk, gq, wsel == 1u), 0u, wsel == 0u)) * RPW;
    let m_len = select(select(op_u(6u), op_u(5u), wsel == 1u), op_u(1u), wsel == 0u);
    let wb = select(select(3u, 2u, wsel == 1u), 0u, wsel == 0u);
#else
    let m0 = group_id(wid, nwg) * RPW;
    let m_len = op_u(1u);
    let wb = 0u;
#endif
    let n_cols = op_u(2u);
#if ID
    let n_used = t_ne({{IDS}}u, 0u);
    let e_col = wid.z % n_used;
    let t_col = wid.z / n_used;
    let id = src{{IDS}}[t_idx({{IDS}}u, vec4<u32>(e_col, t_col, 0u, 0u))];
    let id_ok = id >= 0 && u32(id) < t_ne(0u, 2u);
    let a2 = select(0u, u32(id), id_ok);
    let a3 = 0u;
    let x_at = vec4<u32>(0u, e_col % t_ne(1u, 1u), t_col, 0u);
#else
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);
    let x_at = vec4<u32>(0u, 0u, i2, i3);
#endif
    let rows = min(RPW, m_len - min(m0, m_len));
    // Where each row starts in src0 (and src2); rows past the end repeat the last one (all rows
    // of the workgroups past the last, where a grid of over 65,535 folds into x and y), so every
    // row's loads are valid and issued without a branch (their sums are dropped at the store).
#unroll r RPW
#if ROPE
    let wi_$r = vec4<u32>(0u, rope_row(m0, $ru, m_len), a2, a3);
#else
    let wi_$r = vec4<u32>(0u, min(m0 + $ru, m_len - 1u), a2, a3);
#endif
    let row0_$r = t_idx(wb, wi_$r);
#if GLU
    let row2_$r = t_idx(2u, wi_$r);
#endif
#unroll c NC
    var acc_$r_$c = 0.0;
#if GLU
    var up_$r_$c = 0.0;
#endif
#endunroll
#endunroll
#if NORM
#unroll c NC
    var ss_$c = 0.0;
#endunroll
    let g0 = t_off({{G}}u) / 4u;
#endif
    let x0 = t_idx(1u, x_at) / 4u;
    let xcol = t_nb(1u, 1u) / 4u;
    let units = op_u(0u) / 32u;
#if Q8X
    // The rounded activations' first column for this workgroup, and their columns.
#if ID
    let xc0 = e_col % op_u(5u) + op_u(5u) * t_col;
    let x_cols = op_u(6u);
#else
    let xc0 = 0u;
    let x_cols = n_cols;
#endif
#endif
#if JOB
    for (var j = lid; j < units / UPJ; j += WG) {
#unroll k UPJ
        let u_$k = job_unit(j, $ku);
#unroll c NC
        var x_$k_$c = XU(vec4<u32>(0u), vec4<u32>(0u), 0.0, 0.0);
        if ($cu < n_cols) {
            x_$k_$c = xunit(xc0 + $cu, u_$k, units, x_cols);
        }
#if NORM
        ss_$c += x_$k_$c.ss;
#endif
        let xs_$k_$c = xsums(x_$k_$c);
#endunroll
#endunroll
#unroll r RPW
#if GLU
        wsel = 0u;
#endif
        let w_$r = jobq(row0_$r, j);
#if GLU
        wsel = 1u;
        let g_$r = jobq(row2_$r, j);
#endif
#unroll c NC
#unroll k UPJ
        acc_$r_$c += x_$k_$c.d * jdot(w_$r, $ku, x_$k_$c, xs_$k_$c);
#if GLU
        up_$r_$c += x_$k_$c.d * jdot(g_$r, $ku, x_$k_$c, xs_$k_$c);
#endif
#endunroll
#endunroll
#endunroll
    }
#else
    for (var u = lid / LPU; u < units; u += WG / LPU) {
#if Q8X
        // Each column's unit: its quants, its scale, each part's sum of quants.
#unroll c NC
        var x_$c = XU(vec4<u32>(0u), vec4<u32>(0u), 0.0, 0.0);
        if ($cu < n_cols) {
            x_$c = xunit(xc0 + $cu, u, units, x_cols);
        }
#if NORM
        // The unit's sum of h², for the norm's scale at the end.
        ss_$c += x_$c.ss;
#endif
        let xa_$c = x_$c.a;
        let xb_$c = x_$c.b;
        let dx_$c = x_$c.d;
#unroll p 4
        let qa_$c_$p = xword(xa_$c, xb_$c, xpair($pu).x);
        let qb_$c_$p = xword(xa_$c, xb_$c, xpair($pu).y);
        let xs_$c_$p = dot4I8Packed(qa_$c_$p, 0x01010101u) + dot4I8Packed(qb_$c_$p, 0x01010101u);
#endunroll
#endunroll
#unroll r RPW
#unroll p 4
#if GLU
        wsel = 0u;
#endif
        let w_$r_$p = partq(row0_$r, u, $pu);
#if GLU
        wsel = 1u;
        let g_$r_$p = partq(row2_$r, u, $pu);
#endif
#endunroll
#unroll c NC
        acc_$r_$c += dx_$c * (dotq(w_$r_0, qa_$c_0, qb_$c_0, xs_$c_0)
            + dotq(w_$r_1, qa_$c_1, qb_$c_1, xs_$c_1) + dotq(w_$r_2, qa_$c_2, qb_$c_2, xs_$c_2)
            + dotq(w_$r_3, qa_$c_3, qb_$c_3, xs_$c_3));
#if GLU
        up_$r_$c += dx_$c * (dotq(g_$r_0, qa_$c_0, qb_$c_0, xs_$c_0)
            + dotq(g_$r_1, qa_$c_1, qb_$c_1, xs_$c_1) + dotq(g_$r_2, qa_$c_2, qb_$c_2, xs_$c_2)
            + dotq(g_$r_3, qa_$c_3, qb_$c_3, xs_$c_3));
#endif
#endunroll
#endunroll
#else
        let p = lid % 4u;
        let xp = xpair(p);
        let xo = x0 + 8u * u;
        // The part's activations, once for all rows (zeros for absent columns).
#unroll c NC
        var xa_$c = vec4<f32>(0.0);
        var xb_$c = vec4<f32>(0.0);
        if ($cu < n_cols) {
            xa_$c = src1[xo + $cu * xcol + xp.x];
            xb_$c = src1[xo + $cu * xcol + xp.y];
        }
#if NORM
        ss_$c += dot(xa_$c, xa_$c) + dot(xb_$c, xb_$c);
        xa_$c *= src{{G}}[g0 + 8u * u + xp.x];
        xb_$c *= src{{G}}[g0 + 8u * u + xp.y];
#endif
#if U_INTQ
        let xq_$c = XS(xa_$c, xb_$c, dot(xa_$c + xb_$c, vec4<f32>(1.0)));
#endif
#endunroll
#unroll r RPW
#if GLU
        wsel = 0u;
#endif
        let w_$r = {{LOAD}}(row0_$r, u, p);
#if GLU
        wsel = 1u;
        let g_$r = {{LOAD}}(row2_$r, u, p);
#endif
#unroll c NC
#if U_INTQ
        acc_$r_$c += dotw(w_$r, xq_$c);
#if GLU
        up_$r_$c += dotw(g_$r, xq_$c);
#endif
#else
        acc_$r_$c += dot2(w_$r, xa_$c, xb_$c);
#if GLU
        up_$r_$c += dot2(g_$r, xa_$c, xb_$c);
#endif
#endif
#endunroll
#endunroll
#endif
    }
#endif
    // Lane lid's sum k goes to red[k * WG + lid]; the workgroup's total lands in red[k * WG].
#unroll r RPW
#unroll c NC
    red[($ru * NC + $cu) * WG + lid] = acc_$r_$c;
#if GLU
    red[((RPW + $ru) * NC + $cu) * WG + lid] = up_$r_$c;
#endif
#endunroll
#endunroll
#if NORM
#unroll c NC
    red[(NS + $cu) * WG + lid] = ss_$c;
#endunroll
#endif
    // RL lanes a sum (up to 8, as many as WG / NSUM allows): lane j adds slots j, j + RL, ...
    // into slot j, then one lane a sum adds the RL: three barriers (two with RL = 1) where a
    // halving tree took log2(WG) + 1. Slot j is read only by the lane that writes it, so no
    // barrier parts the two; with more sums than lanes (RL = 1) a lane takes several. Few
    // barriers matter most where a driver runs them as coroutine switches (CPU drivers), and
    // the fixed lane count beat a subgroupAdd per sum on discrete GPUs too
    // (bench/results/HISTORY.md, "mat-vec sums").
    workgroupBarrier();
    for (var q = lid; q < NSUM * RL; q += WG) {
        let k = q / RL;
        var t = 0.0;
        for (var i = q % RL; i < WG; i += RL) {
            t += red[k * WG + i];
        }
        red[k * WG + q % RL] = t;
    }
    workgroupBarrier();
    if (RL > 1u) {
        for (var k = lid; k < NSUM; k += WG) {
            var t = red[k * WG];
            for (var i = 1u; i < RL; i++) {
                t += red[k * WG + i];
            }
            red[k * WG] = t;
        }
        workgroupBarrier();
    }
    // Lane lid stores sum lid: column c of row m0 + r for sum r · NC + c. With STORE_LOOP (a CPU
    // adapter's workgroups, fewer lanes than sums) also sums lid + WG, ...: a flag, because the
    // loop alone, run once a lane, costs GPUs measurably.
#if STORE_LOOP
    for (var os = lid; os < RPW * NC; os += WG) {
#else
    {
        let os = lid;
#endif
        let r = os / NC;
        let c = os % NC;
#if ROPE
        if (r < RPW && rope_ok(m0, r, m_len) && c < n_cols) {
#if NORM
            let inv = 1.0 / sqrt(red[(NS + c) * WG] / f32(op_u(0u)) + op_f(7u));
#else
            let inv = 1.0;
#endif
            let m = rope_row(m0, r, m_len);
            let y = red[(r * NC + c) * WG] * inv;
            let slot = cache_row(c);
            if (wsel == 2u) {
                store_dst(t_idx({{D}}u, vec4<u32>(m, slot, 0u, 0u)), y);
                {{NEXT}};
            }
            // Rotate with the partner row (the pair's other side).
            let hh = t_ne({{OQ}}u, 0u) / 2u;
            let side = r / (RPW / 2u);
            let j = rope_pair(m0, r, m_len) % hh;
            var out = y;
            if (j < op_u(8u) / 2u) {
                let yp = red[(((r + RPW / 2u) % RPW) * NC + c) * WG] * inv;
                let pos = f32(src{{P}}[t_idx({{P}}u, vec4<u32>(c, 0u, 0u, 0u))]);
                var theta = rope_theta(pos, j, op_f(14u));
#if FREQ_FACTORS
                theta = theta / src{{FF}}[t_idx({{FF}}u, vec4<u32>(j, 0u, 0u, 0u))];
#endif
                let cs = rope_yarn(theta, j, 9u);
                // (x0, x1) is the pair's (a, b).
                let x0 = select(yp, y, side == 0u);
                let x1 = select(y, yp, side == 0u);
                out = select(x0 * cs.y + x1 * cs.x, x0 * cs.x - x1 * cs.y, side == 0u);
            }
            if (wsel == 0u) {
                src{{OQ}}[t_idx({{OQ}}u, vec4<u32>(m % (2u * hh), m / (2u * hh), c, 0u))] = out;
            } else {
                src{{OK}}[t_idx({{OK}}u, vec4<u32>(m, slot, 0u, 0u))] = {{KT}}(out);
            }
        }
#else
        if (r < rows && c < n_cols) {
#if ID
            let o = vec4<u32>(m0 + r, e_col, t_col, 0u);
#else
            let o = vec4<u32>(m0 + r, c, i2, i3);
#endif
#if NORM
            let y = red[(r * NC + c) * WG] / sqrt(red[(NS + c) * WG] / f32(op_u(0u)) + op_f(7u));
#else
            let y = red[(r * NC + c) * WG];
#endif
#if ADD
            store_dst(t_idx({{D}}u, o), y + load_src2(t_idx(2u, o)));
#else
#if QKV
            if (wsel == 0u) {
                src{{OQ}}[t_idx({{OQ}}u, o)] = y;
            } else if (wsel == 1u) {
                src{{OK}}[t_idx({{OK}}u, o)] = y;
            } else {
                store_dst(t_idx({{D}}u, o), y);
            }
#else
#if GLU
            let x = y;
#if NORM
            let g = red[((RPW + r) * NC + c) * WG] / sqrt(red[(NS + c) * WG] / f32(op_u(0u)) + op_f(7u));
#else
            let g = red[((RPW + r) * NC + c) * WG];
#endif
#if ID
            store_dst(t_idx({{D}}u, o), select(bitcast<f32>(0x7fc00000u), {{EXPR}}, id_ok));
#else
            store_dst(t_idx({{D}}u, o), {{EXPR}});
#endif
#else
#if ID
            store_dst(t_idx({{D}}u, o), select(bitcast<f32>(0x7fc00000u), y, id_ok));
#else
            store_dst(t_idx({{D}}u, o), y);
#endif
#endif
#endif
#endif
        }
#endif
    }
}
