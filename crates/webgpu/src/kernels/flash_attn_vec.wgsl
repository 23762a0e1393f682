// Decode attention (ggml_flash_attn_ext with few query rows): one workgroup per (query row iq,
// batch b, group of GQ query heads that share one K/V head) and per split of the keys, so each
// K/V row is read once for all GQ heads. Bindings and parameters as `flash_attn.wgsl` (op_u(8)
// = keys per split, op_u(9) = splits when SPLIT); heads h = hg·GQ .. hg·GQ + GQ - 1 of head
// group hg all map to one K head and one V head (the planner picks GQ dividing both ratios).
//
// Lanes work in octets: the 8 lanes of octet o take KB consecutive keys per step (the WG / 8
// octets cover NG·KB keys a step), lane u reading parts u, u + 8, ... of each K and V row (a
// part is 8 values: one 16-byte load of an f16 row; `{k,v}_raw` and `_dec` of
// `flash_attn_kv.wgsl` with VEC), so a row is read whole by one octet, coalesced. A step's K and V
// loads are all issued before any arithmetic on them, so the step waits on one round trip to
// memory: those loads are what a long walk waits on. The q·k partial sums are added across the
// octet: with SUBGROUP through subgroupShuffleXor within 8-aligned subgroup lanes (the
// octets numbered by subgroup; the planner takes that only with subgroups of 8 to WG lanes),
// else through workgroup memory (`osum`, two barriers a step: every octet takes every step, a
// step's count being the workgroup's, so the barriers are in uniform control flow). Each octet
// keeps its own online softmax (m, l per head) and output parts. At the end the octets' states
// are merged through workgroup memory.
//
// Masks (MASK): the keys are taken in chunks of CH. A chunk's mask terms (MH rows: one, or one
// per head with MASK_HEADS, ALiBi slopes applied) are loaded once into workgroup memory, each
// lane MSL of them in flight together, with the first and last key some head sees; the steps
// then walk only that visible range, reading the terms from workgroup memory (no mask load and
// no registers held for one in the key loop). A model passes its whole cache and hides the
// unwritten tail with -inf: those keys cost one mask load each, never a step, and a split that
// sees no key at all writes its empty state without merging. SOFTCAP: tanh softcapping.
//
// Q8X (unsplit only): the result goes to dst (i32 words) rounded to int8 per unit of 32, in
// `quant_act.wgsl`'s layout (column iq + n_q·b, unit h·DV/32 + j), for a Q8X mat-vec (the
// attention output projection) to read without a rounding dispatch of its own: the lanes of
// octet j take unit j of a head, four values each.
// SPLIT: each (row, head) writes (m, l, acc[DV]) to scratch (dst) at
// ((h + n_head·(iq + n_q·b))·splits + s)·(DV + 2), merged by `flash_attn_combine.wgsl`; else
// the sink (SINKS) is applied and the normalized result stored to dst [DV, n_head, n_q, batch].

const WG: u32 = {{WG}}u;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const GQ: u32 = {{GQ}}u;
// Keys an octet takes per step, octets per workgroup.
const KB: u32 = {{KB}}u;
const NG: u32 = WG / 8u;
// Parts of a K and a V row.
const PK: u32 = D / 8u;
const PV: u32 = DV / 8u;
const NEG: f32 = -3.402823e38;
// q values a lane loads; mask rows staged per key, keys per chunk, mask terms a lane stages.
const QPL: u32 = {{QPL}}u;
const MH: u32 = {{MH}}u;
const CH: u32 = {{CH}}u;
const MSL: u32 = {{MSL}}u;

// Values 8p .. 8p + 7 of a row, and their loaded words (`flash_attn_kv.wgsl`).
struct Part {
    a: vec4<f32>,
    b: vec4<f32>,
}

struct Raw {
    w: vec4<u32>,
    x: vec4<u32>,
}

// The GQ query rows, pre-scaled, as vec4s.
var<workgroup> qsh: array<vec4<f32>, {{QV4}}>;
// The final merge of the octets' outputs.
var<workgroup> red: array<f32, {{RED}}>;
// Per octet and head: m, then l (final merge).
var<workgroup> gm: array<f32, {{NGQ}}>;
var<workgroup> gl: array<f32, {{NGQ}}>;
#if MASK
// A chunk's mask terms, row r (head h0 + r) at msk[r·CH + key - chunk start]; the visible key
// range as atomics (0xffffffff - first, last + 1; zero when none) and read back uniformly.
var<workgroup> msk: array<f32, {{MSK}}>;
var<workgroup> vis_at: array<atomic<u32>, 2>;
var<workgroup> vis_range: vec2<u32>;
#endif

// q_g · part p of a K row.
fn qdot(g: u32, p: u32, x: Part) -> f32 {
    let i = (g * D + 8u * p) / 4u;
    return dot(qsh[i], x.a) + dot(qsh[i + 1u], x.b);
}

#if SUBGROUP
// The sum of v over the octet (8 aligned subgroup lanes), in every lane of it.
fn octet_sum(v: f32) -> f32 {
    let s1 = v + subgroupShuffleXor(v, 1u);
    let s2 = s1 + subgroupShuffleXor(s1, 2u);
    return s2 + subgroupShuffleXor(s2, 4u);
}
#else
// A step's partial q·k sums, sum i (key k, head g: i = k·GQ + g) of lane t at osum[i·WG + t].
var<workgroup> osum: array<f32, {{OSUM}}>;

// Sum i over the octet of lane t, read after the barrier that follows every lane's store.
fn octet_sum_at(i: u32, t: u32) -> f32 {
    let o = i * WG + (t & ~7u);
    return ((osum[o] + osum[o + 1u]) + (osum[o + 2u] + osum[o + 3u]))
        + ((osum[o + 4u] + osum[o + 5u]) + (osum[o + 6u] + osum[o + 7u]));
}
#endif

#if Q8X
#if SUBGROUP
// The largest of v over the octet, in every lane of it.
fn octet_max(v: f32) -> f32 {
    let s1 = max(v, subgroupShuffleXor(v, 1u));
    let s2 = max(s1, subgroupShuffleXor(s1, 2u));
    return max(s2, subgroupShuffleXor(s2, 4u));
}
#endif

// Values 4t .. 4t + 3 of head h's output x for column col, rounded: word t % 8 of unit t / 8,
// and that unit's scale from its first lane; m is the unit's largest magnitude.
fn q8x_store(h: u32, col: u32, t: u32, x: vec4<f32>, m: f32) {
    let units = DV * t_ne(0u, 2u) / 32u;
    let cols = t_ne(0u, 1u) * t_ne(0u, 3u);
    let unit = col * units + h * (DV / 32u) + t / 8u;
    let base = t_off(5u);
    dst[base + 8u * unit + t % 8u] = bitcast<i32>(pack4x8snorm(x * select(1.0 / m, 0.0, m == 0.0)));
    if (t % 8u == 0u) {
        dst[base + 8u * cols * units + unit] = bitcast<i32>(m / 127.0);
    }
}
#endif

// The score of a key from its reduced dot product: softcap, then the mask term.
fn logit(x: f32, mv: f32) -> f32 {
#if SOFTCAP
    let s = op_f(5u) * tanh(clamp(x, -10.0, 10.0));
#else
    let s = x;
#endif
    return select(NEG, s + mv, mv > NEG);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
#if SUBGROUP
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_size) sg_size: u32,
#endif
        @builtin(local_invocation_index) lid: u32) {
    let gall = group_id(wid, nwg);
#if SPLIT
    let splits = op_u(9u);
    let split = gall % splits;
    let g = gall / splits;
#else
    let split = 0u;
    let g = gall;
#endif
    if (g >= n_items()) {
        return;
    }
    let n_head = t_ne(0u, 2u);
    let n_q = t_ne(0u, 1u);
    let n_hg = n_head / GQ;
    let h0 = (g % n_hg) * GQ;
    let iq = (g / n_hg) % n_q;
    let b = g / (n_hg * n_q);
    let n_kv = t_ne(1u, 1u);
#if SPLIT
    let kbeg = split * op_u(8u);
    let kend = min(n_kv, kbeg + op_u(8u));
#else
    let kbeg = 0u;
    let kend = n_kv;
#endif
#if SUBGROUP
    // Octets follow subgroup lanes, which local_invocation_index need not.
    let lane = sg_id * sg_size + sg_lane;
#else
    let lane = lid;
#endif
    let oct = lane / 8u;
    let u = lane % 8u;

    // q, pre-scaled: QPL loads a lane, in flight together (stored once the first chunk's mask
    // loads are issued too).
    let scale = op_f(0u);
#unroll t QPL
    let qi_$t = lid + $tu * WG;
    var qv_$t = 0.0;
    if (qi_$t < GQ * D) {
        qv_$t = scale * load_src0(t_idx(0u, vec4<u32>(qi_$t % D, iq, h0 + qi_$t / D, b)));
    }
#endunroll
    let krow0 = t_idx(1u, vec4<u32>(0u, 0u, h0 / op_u(6u), b));
    let knb1 = t_nb(1u, 1u);
    let vrow0 = t_idx(2u, vec4<u32>(0u, 0u, h0 / op_u(7u), b));
    let vnb1 = t_nb(2u, 1u);
#if MASK
    let mnb0 = t_nb(3u, 0u);
#unroll r MH
    let mrow_$r = t_idx(3u, vec4<u32>(0u, iq, (h0 + $ru) % t_ne(3u, 2u), b % t_ne(3u, 3u)));
    let slope_$r = alibi(h0 + $ru);
#endunroll
    if (lid == 0u) {
        atomicStore(&vis_at[0], 0u);
        atomicStore(&vis_at[1], 0u);
    }
    workgroupBarrier();
#endif
#unroll g GQ
    var m_$g = NEG;
    var l_$g = 0.0;
#unroll i NPV
    var acc_$g_$i = Part(vec4<f32>(0.0), vec4<f32>(0.0));
#endunroll
#endunroll
    // Whether some key of the split was visible (uniform).
    var seen = false;
    for (var c0 = kbeg; c0 < kend; c0 += CH) {
        let cend = min(kend, c0 + CH);
#if MASK
        // The chunk's mask terms: row r of staged value i is i / CH, its key c0 + i % CH.
#unroll t MSL
        let mi_$t = lid + $tu * WG;
        let mk_$t = c0 + mi_$t % CH;
        var mt_$t = NEG;
        if (mi_$t < CH * MH && mk_$t < cend) {
            let r = mi_$t / CH;
            var row = mrow_0;
            var slope = slope_0;
#unroll r MH
            if (r == $ru) {
                row = mrow_$r;
                slope = slope_$r;
            }
#endunroll
            mt_$t = slope * load_src3(row + mk_$t * mnb0);
        }
#endunroll
        // The previous chunk's steps are done with msk.
        if (c0 != kbeg) {
            workgroupBarrier();
        }
#endif
        if (c0 == kbeg) {
#unroll t QPL
            if (qi_$t < GQ * D) {
                qsh[qi_$t / 4u][qi_$t % 4u] = qv_$t;
            }
#endunroll
        }
#if MASK
        var lo = 0xffffffffu;
        var hi = 0u;
#unroll t MSL
        if (mi_$t < CH * MH) {
            msk[mi_$t] = mt_$t;
            if (mt_$t > NEG) {
                lo = min(lo, mk_$t);
                hi = max(hi, mk_$t + 1u);
            }
        }
#endunroll
        if (hi > 0u) {
            atomicMax(&vis_at[0], 0xffffffffu - lo);
            atomicMax(&vis_at[1], hi);
        }
        workgroupBarrier();
        if (lid == 0u) {
            vis_range = vec2<u32>(0xffffffffu - atomicLoad(&vis_at[0]), atomicLoad(&vis_at[1]));
            atomicStore(&vis_at[0], 0u);
            atomicStore(&vis_at[1], 0u);
        }
        let vr = workgroupUniformLoad(&vis_range);
        let vlo = vr.x;
        let vhi = vr.y;
#else
        workgroupBarrier();
        let vlo = c0;
        let vhi = cend;
#endif
        var steps = 0u;
        if (vhi > vlo) {
            steps = (vhi - vlo + NG * KB - 1u) / (NG * KB);
            seen = true;
        }
        for (var st = 0u; st < steps; st++) {
            let j0 = vlo + st * NG * KB + oct * KB;
            // The step's mask terms, which keys some head sees, then every K/V load.
#unroll k KB
            let j_$k = j0 + $ku;
#unroll g GQ
            var mv_$k_$g = NEG;
#endunroll
            if (j_$k < vhi) {
#unroll g GQ
#if MASK
                mv_$k_$g = msk[min($gu, MH - 1u) * CH + j_$k - c0];
#else
                mv_$k_$g = 0.0;
#endif
#endunroll
            }
            var vis_$k = false;
#unroll g GQ
            vis_$k = vis_$k || mv_$k_$g > NEG;
#endunroll
#unroll i NPK
            var x_$k_$i = Raw(vec4<u32>(0u), vec4<u32>(0u));
            if (vis_$k && u + $iu * 8u < PK) {
                x_$k_$i = k_raw(krow0 + j_$k * knb1, u + $iu * 8u);
            }
#endunroll
#unroll i NPV
            var y_$k_$i = Raw(vec4<u32>(0u), vec4<u32>(0u));
            if (vis_$k && u + $iu * 8u < PV) {
                y_$k_$i = v_raw(vrow0 + j_$k * vnb1, u + $iu * 8u);
            }
#endunroll
#endunroll
            // Partial dot products of this lane's parts.
#unroll k KB
#unroll g GQ
            var s_$k_$g = 0.0;
#unroll i NPK
            s_$k_$g += qdot($gu, min(u + $iu * 8u, PK - 1u), k_dec(x_$k_$i));
#endunroll
#endunroll
#endunroll
#if SUBGROUP
#unroll k KB
#unroll g GQ
            s_$k_$g = logit(octet_sum(s_$k_$g), mv_$k_$g);
#endunroll
#endunroll
#else
#unroll k KB
#unroll g GQ
            osum[($ku * GQ + $gu) * WG + lane] = s_$k_$g;
#endunroll
#endunroll
            workgroupBarrier();
#unroll k KB
#unroll g GQ
            s_$k_$g = logit(octet_sum_at($ku * GQ + $gu, lane), mv_$k_$g);
#endunroll
#endunroll
            // The next step's stores wait for every lane's reads.
            workgroupBarrier();
#endif
            // Online softmax per head over the octet's KB keys.
#unroll g GQ
            var mn_$g = m_$g;
#unroll k KB
            mn_$g = max(mn_$g, s_$k_$g);
#endunroll
            let alpha_$g = exp(m_$g - mn_$g);
            l_$g *= alpha_$g;
#unroll i NPV
            acc_$g_$i.a *= alpha_$g;
            acc_$g_$i.b *= alpha_$g;
#endunroll
#unroll k KB
            let p_$k_$g = select(0.0, exp(s_$k_$g - mn_$g), s_$k_$g > NEG);
            l_$g += p_$k_$g;
#unroll i NPV
            let yd_$k_$g_$i = v_dec(y_$k_$i);
            acc_$g_$i.a += p_$k_$g * yd_$k_$g_$i.a;
            acc_$g_$i.b += p_$k_$g * yd_$k_$g_$i.b;
#endunroll
#endunroll
            m_$g = mn_$g;
#endunroll
        }
    }

    // No key visible (a split past the written part of a cache): the empty state, no merge.
    if (!seen) {
        for (var i = lid; i < GQ * (DV + 2u); i += WG) {
            let h = h0 + i / (DV + 2u);
            let c = i % (DV + 2u);
#if SPLIT
            let base = t_off(5u) + ((h + n_head * (iq + n_q * b)) * op_u(9u) + split) * (DV + 2u);
            store_dst(base + c, select(0.0, NEG, c == 0u));
#else
#if Q8X
            if (c % 4u == 0u && c < DV) {
                q8x_store(h, iq + n_q * b, c / 4u, vec4<f32>(0.0), 0.0);
            }
#else
            if (c < DV) {
                store_dst(t_idx(5u, vec4<u32>(c, h, iq, b)), 0.0);
            }
#endif
#endif
        }
        return;
    }

    // Merge the octets: the largest m per head, each octet's state rescaled to it, summed.
    if (u == 0u) {
#unroll g GQ
        gm[oct * GQ + $gu] = m_$g;
#endunroll
    }
    workgroupBarrier();
#unroll g GQ
    var mm_$g = NEG;
    for (var o = 0u; o < NG; o++) {
        mm_$g = max(mm_$g, gm[o * GQ + $gu]);
    }
    let f_$g = exp(m_$g - mm_$g);
#endunroll
    if (u == 0u) {
#unroll g GQ
        gl[oct * GQ + $gu] = l_$g * f_$g;
#endunroll
    }
    workgroupBarrier();
#unroll g GQ
    var ll_$g = 0.0;
    for (var o = 0u; o < NG; o++) {
        ll_$g += gl[o * GQ + $gu];
    }
#endunroll
#unroll g GQ
    {
        let h = h0 + $gu;
#unroll i NPV
        if (u + $iu * 8u < PV) {
            let c = oct * DV + 8u * (u + $iu * 8u);
            let a = acc_$g_$i.a * f_$g;
            let bb = acc_$g_$i.b * f_$g;
            red[c] = a.x;
            red[c + 1u] = a.y;
            red[c + 2u] = a.z;
            red[c + 3u] = a.w;
            red[c + 4u] = bb.x;
            red[c + 5u] = bb.y;
            red[c + 6u] = bb.z;
            red[c + 7u] = bb.w;
        }
#endunroll
        workgroupBarrier();
#if SPLIT
        let base = t_off(5u) + ((h + n_head * (iq + n_q * b)) * op_u(9u) + split) * (DV + 2u);
        if (lid == 0u) {
            store_dst(base, mm_$g);
            store_dst(base + 1u, ll_$g);
        }
#else
        var l = ll_$g;
        var fs = 1.0;
#if SINKS
        let sink = load_src4(t_idx(4u, vec4<u32>(h, 0u, 0u, 0u)));
        if (sink > mm_$g) {
            fs = exp(mm_$g - sink);
            l = l * fs + 1.0;
        } else {
            l += exp(sink - mm_$g);
        }
#endif
        let inv = select(fs / l, 0.0, l == 0.0);
#endif
#if Q8X
        // Lane t < DV / 4 holds values 4t .. 4t + 3; the octet of a unit's 8 lanes finds its
        // largest magnitude (every lane takes part: with workgroup memory, a barrier).
        var y = vec4<f32>(0.0);
        if (lane < DV / 4u) {
            var x = vec4<f32>(0.0);
            for (var w = 0u; w < NG; w++) {
                let r = w * DV + 4u * lane;
                x += vec4<f32>(red[r], red[r + 1u], red[r + 2u], red[r + 3u]);
            }
            y = x * inv;
        }
        let am = max(max(abs(y.x), abs(y.y)), max(abs(y.z), abs(y.w)));
#if SUBGROUP
        let m = octet_max(am);
#else
        osum[lane] = am;
        workgroupBarrier();
        let o = lane & ~7u;
        let m = max(max(max(osum[o], osum[o + 1u]), max(osum[o + 2u], osum[o + 3u])),
                    max(max(osum[o + 4u], osum[o + 5u]), max(osum[o + 6u], osum[o + 7u])));
#endif
        if (lane < DV / 4u) {
            q8x_store(h, iq + n_q * b, lane, y, m);
        }
#else
        for (var c = lid; c < DV; c += WG) {
            var o = 0.0;
            for (var w = 0u; w < NG; w++) {
                o += red[w * DV + c];
            }
#if SPLIT
            store_dst(base + 2u + c, o);
#else
            store_dst(t_idx(5u, vec4<u32>(c, h, iq, b)), o * inv);
#endif
        }
#endif
        workgroupBarrier();
    }
#endunroll
}
