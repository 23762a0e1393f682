// ggml_top_k and ggml_argmax, one workgroup per row (i1, i2, i3) of src0: the indices of the K
// largest values, largest first, ties to the lower index; dst is i32 [K, ne1, ne2, ne3] (top_k)
// or [ne1] (argmax, K = 1).
//
// Values compare as ordered u32 keys (-0 = +0). A NaN is above every number for top_k (the CPU
// sorts it first) and below every number for argmax, whose answer is 0 when the row starts with
// NaN (the CPU's `v > best` scan never leaves a NaN at index 0 and never picks one elsewhere).
// An element ranks by its composite (key, !index): distinct, larger first.
//
// Each invocation loads its first VPL elements (j = lid + v·WG) into registers at once; the rest
// (rows longer than a CHUNKS workgroup's) are loaded again when needed.
// K = 1: each invocation keeps its strided slice's best, then one workgroup reduction (with
// SUBGROUP: subgroupMax of the key, subgroupMin of the index among its holders, then one step
// across subgroups; else a workgroup-memory tree).
// RADIX (K > 1): a radix select of the K-th composite, 8 bits a pass from the top (the key's
// four bytes, then the index's while ties at the key remain): each pass histograms the digit of
// the elements that share the prefix chosen so far, and the invocation of the bin where the
// count from the top reaches the number still needed records it. Once that whole bin is needed,
// the selection is every element whose prefix is at or above it: those are appended to
// workgroup memory, and each invocation of the first K ranks one of them against the others.
// So the cost is four barriers a pass (two in workgroupUniformLoad) and a handful of passes
// (four for distinct values), whatever K, where K rounds of a workgroup max took K·log2(WG).
//
// Long rows (a vocabulary) go in two dispatches, so that many workgroups share the row:
// CHUNKS: workgroup g = row·C + c (C = op_u(0)) takes elements [c·CH, (c + 1)·CH) (CH = op_u(1))
//   and writes its top K, in no order, as (order key, index) pairs of i32 bits to scratch (the
//   dst binding) at 2·(g·K + slot); a slot with no element gets index NONE.
// MERGE: one workgroup per row reads the row's C·K pairs from scratch (src0) and selects the top
//   K of them as the one-pass kernel does; src1 is the original row (argmax's first-NaN rule).

const WG: u32 = {{WG}}u;
const K: u32 = {{K}}u;
// Elements per invocation kept in registers (top_k.rs's CHUNK / WG).
const VPL: u32 = 16u;
const NONE: u32 = 0xffffffffu;
// The dst binding's descriptor.
const DST: u32 = {{DST}}u;

// This workgroup's elements: src element (lo + j)·nb0 from `base` (scratch pair j from `base`
// for MERGE), j < m.
var<private> base: u32;
var<private> nb0: u32;
var<private> lo: u32;
var<private> m: u32;

// Whether (k1, i1) ranks before (k2, i2): the larger key, then the lower index.
fn before(k1: u32, i1: u32, k2: u32, i2: u32) -> bool {
    return k1 > k2 || (k1 == k2 && i1 < i2);
}

fn is_nan_bits(bits: u32) -> bool {
    return (bits & 0x7fffffffu) > 0x7f800000u;
}

// A u32 whose order is the values' order.
fn order_key(v: f32) -> u32 {
    let bits = bitcast<u32>(select(v, 0.0, v == 0.0));
    if (is_nan_bits(bits)) {
#if ARGMAX
        return 0u;
#else
        return NONE;
#endif
    }
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

// Element j as (key, index); index NONE for none.
fn elem(j: u32) -> vec2<u32> {
    if (j >= m) {
        return vec2<u32>(0u, NONE);
    }
#if MERGE
    let o = base + 2u * j;
    return vec2<u32>(bitcast<u32>(src0[o]), bitcast<u32>(src0[o + 1u]));
#else
    let i = lo + j;
    return vec2<u32>(order_key(load_src0(base + i * nb0)), i);
#endif
}

#if RADIX
// One bin per invocation.
const BINS: u32 = 256u;
const_assert WG == BINS;
// Three histograms in turn: pass p counts into p % 3 and clears (p + 1) % 3, which pass p - 2
// used (two barriers ago), so a pass needs no barrier of its own for the clearing.
var<workgroup> hist: array<atomic<u32>, 768>;
// Sums of 16 bins each.
var<workgroup> part: array<u32, 16>;
// The chosen prefix (key, !index), its mask, the number still needed; whether it is final.
// Read at the start of a pass, written by one invocation after its second barrier.
var<workgroup> state: array<u32, 5>;
var<workgroup> done: u32;
var<workgroup> sel_key: array<u32, K>;
var<workgroup> sel_idx: array<u32, K>;
var<workgroup> n_sel: atomic<u32>;

var<private> pre: vec2<u32>;
var<private> mask: vec2<u32>;
var<private> need: u32;
// A run of one invocation's elements in one bin, added to it by one atomic.
var<private> run_bin: u32;
var<private> run_n: u32;

fn flush(h: u32) {
    if (run_n > 0u) {
        atomicAdd(&hist[h + run_bin], run_n);
    }
    run_n = 0u;
}

// Counts e in histogram h if it has the chosen prefix.
fn count(e: vec2<u32>, p: u32, h: u32) {
    let c = vec2<u32>(e.x, ~e.y);
    if (e.y == NONE || any((c & mask) != pre)) {
        return;
    }
    let d = (select(c.y, c.x, p < 4u) >> (24u - 8u * (p % 4u))) & 0xffu;
    if (d != run_bin) {
        flush(h);
        run_bin = d;
    }
    run_n += 1u;
}

// Appends e to the selection if its prefix is at or above the chosen one.
fn take(e: vec2<u32>) {
    let c = vec2<u32>(e.x, ~e.y) & mask;
    if (e.y != NONE && (c.x > pre.x || (c.x == pre.x && c.y >= pre.y))) {
        let s = atomicAdd(&n_sel, 1u);
        if (s < K) {
            sel_key[s] = e.x;
            sel_idx[s] = e.y;
        }
    }
}
#else
var<workgroup> red_key: array<u32, {{WG}}>;
var<workgroup> red_idx: array<u32, {{WG}}>;
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
#if SUBGROUP
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(num_subgroups) n_sg: u32,
#endif
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
#if CHUNKS
    let row = g / op_u(0u);
    let chunk = g % op_u(0u);
#else
    let row = g;
#endif
    if (row >= n_items()) {
        return;
    }
#if MERGE
    let src = 1u;
#else
    let src = 0u;
#endif
    let n1 = t_ne(src, 1u);
    let n2 = t_ne(src, 2u);
    let r = vec4<u32>(0u, row % n1, (row / n1) % n2, row / (n1 * n2));
#if MERGE
    m = op_u(0u) * K;
    base = t_off(0u) + 2u * row * m;
#else
    base = t_idx(0u, r);
    nb0 = t_nb(0u, 0u);
#if CHUNKS
    lo = chunk * op_u(1u);
    m = min(t_ne(0u, 0u), lo + op_u(1u)) - lo;
#else
    m = t_ne(0u, 0u);
#endif
#endif
#unroll v 16
    let e_$v = elem(lid + $vu * WG);
#endunroll
#if RADIX
    atomicStore(&hist[lid], 0u);
    if (lid == 0u) {
        state = array<u32, 5>(0u, 0u, 0u, 0u, K);
        done = 0u;
        atomicStore(&n_sel, 0u);
    }
    workgroupBarrier();
    for (var p = 0u; p < 8u; p++) {
        let h = (p % 3u) * BINS;
        pre = vec2<u32>(state[0], state[1]);
        mask = vec2<u32>(state[2], state[3]);
        need = state[4];
        atomicStore(&hist[(p + 1u) % 3u * BINS + lid], 0u);
#unroll v 16
        count(e_$v, p, h);
#endunroll
        for (var j = lid + VPL * WG; j < m; j += WG) {
            count(elem(j), p, h);
        }
        flush(h);
        workgroupBarrier();
        if (lid < 16u) {
            var s = 0u;
            for (var b = 0u; b < 16u; b++) {
                s += atomicLoad(&hist[h + lid * 16u + b]);
            }
            part[lid] = s;
        }
        workgroupBarrier();
        // The elements above bin lid, and in all.
        var total = 0u;
        var above = 0u;
        for (var q = 0u; q < 16u; q++) {
            total += part[q];
            above += select(0u, part[q], q > lid / 16u);
        }
        for (var b = lid + 1u; b < (lid / 16u + 1u) * 16u; b++) {
            above += atomicLoad(&hist[h + b]);
        }
        if (p == 0u) {
            need = min(K, total);
        }
        let c = atomicLoad(&hist[h + lid]);
        if (above < need && need <= above + c) {
            let shift = 24u - 8u * (p % 4u);
            let hi = p < 4u;
            state[select(1u, 0u, hi)] |= lid << shift;
            state[select(3u, 2u, hi)] |= 0xffu << shift;
            state[4] = need - above;
            done = select(0u, 1u, c == need - above);
        }
        if (workgroupUniformLoad(&done) != 0u) {
            break;
        }
    }
    pre = vec2<u32>(state[0], state[1]);
    mask = vec2<u32>(state[2], state[3]);
#unroll v 16
    take(e_$v);
#endunroll
    for (var j = lid + VPL * WG; j < m; j += WG) {
        take(elem(j));
    }
    workgroupBarrier();
    let cnt = min(atomicLoad(&n_sel), K);
    if (lid >= K) {
        return;
    }
#if CHUNKS
    let o = t_off(1u) + 2u * (g * K + lid);
    dst[o] = bitcast<i32>(select(0u, sel_key[lid], lid < cnt));
    dst[o + 1u] = bitcast<i32>(select(NONE, sel_idx[lid], lid < cnt));
#else
    if (lid < cnt) {
        let key = sel_key[lid];
        let i = sel_idx[lid];
        var rank = 0u;
        for (var s = 0u; s < cnt; s++) {
            rank += select(0u, 1u, before(sel_key[s], sel_idx[s], key, i));
        }
        dst[t_idx(DST, vec4<u32>(rank, r.y, r.z, r.w))] = i32(i);
    }
#endif
#else
    var bk = 0u;
    var bi = NONE;
#unroll v 16
    if (before(e_$v.x, e_$v.y, bk, bi)) {
        bk = e_$v.x;
        bi = e_$v.y;
    }
#endunroll
    for (var j = lid + VPL * WG; j < m; j += WG) {
        let e = elem(j);
        if (before(e.x, e.y, bk, bi)) {
            bk = e.x;
            bi = e.y;
        }
    }
#if SUBGROUP
    let sk = subgroupMax(bk);
    let si = subgroupMin(select(NONE, bi, bk == sk));
    if (sg_lane == 0u) {
        red_key[sg_id] = sk;
        red_idx[sg_id] = si;
    }
    workgroupBarrier();
    let n_red = n_sg;
#else
    red_key[lid] = bk;
    red_idx[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 1u; s = s / 2u) {
        if (lid < s && before(red_key[lid + s], red_idx[lid + s], red_key[lid], red_idx[lid])) {
            red_key[lid] = red_key[lid + s];
            red_idx[lid] = red_idx[lid + s];
        }
        workgroupBarrier();
    }
    let n_red = 2u;
#endif
    if (lid != 0u) {
        return;
    }
    var wk = red_key[0];
    var win = red_idx[0];
    for (var s = 1u; s < n_red; s++) {
        if (before(red_key[s], red_idx[s], wk, win)) {
            wk = red_key[s];
            win = red_idx[s];
        }
    }
#if CHUNKS
    let o = t_off(1u) + 2u * g;
    dst[o] = bitcast<i32>(wk);
    dst[o + 1u] = bitcast<i32>(win);
#else
#if ARGMAX
#if MERGE
    let first = bitcast<u32>(load_src1(t_idx(1u, r)));
#else
    let first = bitcast<u32>(load_src0(base));
#endif
    dst[t_idx(DST, vec4<u32>(r.y, 0u, 0u, 0u))] = i32(select(win, 0u, is_nan_bits(first)));
#else
    dst[t_idx(DST, vec4<u32>(0u, r.y, r.z, r.w))] = i32(win);
#endif
#endif
#endif
}
