// ggml_top_k and ggml_argmax, one workgroup per row (i1, i2, i3) of src0: the indices of the K
// largest values, largest first, ties to the lower index; dst is i32 [K, ne1, ne2, ne3] (top_k)
// or [ne1] (argmax, K = 1).
//
// Values compare as ordered u32 keys (-0 = +0). A NaN is above every number for top_k (the CPU
// sorts it first) and below every number for argmax, whose answer is 0 when the row starts with
// NaN (the CPU's `v > best` scan never leaves a NaN at index 0 and never picks one elsewhere).
// Each invocation keeps the top K of its strided slice of the row, sorted, in private memory;
// then K rounds of a workgroup max over the slices' heads emit the winners in order (the row's
// top K is within the union of the slices' top K).
//
// Long rows (a vocabulary) go in two dispatches, so that many workgroups share the row:
// CHUNKS: workgroup g = row·C + c (C = op_u(0)) takes elements [c·CH, (c + 1)·CH) (CH = op_u(1))
//   and writes its top K as (order key, index) pairs of i32 bits to scratch (the dst binding) at
//   2·(g·K + rank); a rank with no element gets index NONE.
// MERGE: one workgroup per row reads the row's C·K pairs from scratch (src0) and emits the top K
//   of them as the one-pass kernel does; src1 is the original row (argmax's first-NaN rule).

const WG: u32 = {{WG}}u;
const K: u32 = {{K}}u;
const NONE: u32 = 0xffffffffu;
// The dst binding's descriptor.
const DST: u32 = {{DST}}u;

var<workgroup> red_key: array<u32, {{WG}}>;
var<workgroup> red_idx: array<u32, {{WG}}>;

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

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    let base = t_idx(src, r);
    let nb0 = t_nb(src, 0u);
    var keys: array<u32, K>;
    var idx: array<u32, K>;
    var cnt = 0u;
#if MERGE
    let m = op_u(0u) * K;
    let cand = t_off(0u) + 2u * row * m;
    for (var j = lid; j < m; j += WG) {
        let key = bitcast<u32>(src0[cand + 2u * j]);
        let i = bitcast<u32>(src0[cand + 2u * j + 1u]);
        if (i == NONE) {
            continue;
        }
#else
#if CHUNKS
    let lo = chunk * op_u(1u);
    let n = min(t_ne(0u, 0u), lo + op_u(1u));
#else
    let lo = 0u;
    let n = t_ne(0u, 0u);
#endif
    for (var i = lo + lid; i < n; i += WG) {
        let key = order_key(load_src0(base + i * nb0));
#endif
        if (cnt < K || before(key, i, keys[K - 1u], idx[K - 1u])) {
            var p = min(cnt, K - 1u);
            while (p > 0u && before(key, i, keys[p - 1u], idx[p - 1u])) {
                keys[p] = keys[p - 1u];
                idx[p] = idx[p - 1u];
                p--;
            }
            keys[p] = key;
            idx[p] = i;
            cnt = min(cnt + 1u, K);
        }
    }
    var head = 0u;
    for (var rank = 0u; rank < K; rank++) {
        var hk = 0u;
        var hi = NONE;
        if (head < cnt) {
            hk = keys[head];
            hi = idx[head];
        }
        red_key[lid] = hk;
        red_idx[lid] = hi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s / 2u) {
            if (lid < s) {
                let ok = red_key[lid + s];
                let oi = red_idx[lid + s];
                if (ok > red_key[lid] || (ok == red_key[lid] && oi < red_idx[lid])) {
                    red_key[lid] = ok;
                    red_idx[lid] = oi;
                }
            }
            workgroupBarrier();
        }
        let win = red_idx[0];
        if (hi == win && hi != NONE) {
            head++;
        }
        if (lid == 0u) {
#if CHUNKS
            let o = t_off(1u) + 2u * (g * K + rank);
            dst[o] = bitcast<i32>(red_key[0]);
            dst[o + 1u] = bitcast<i32>(win);
#else
#if ARGMAX
#if MERGE
            let first = bitcast<u32>(load_src1(base));
#else
            let first = bitcast<u32>(load_src0(base));
#endif
            dst[t_idx(DST, vec4<u32>(r.y, 0u, 0u, 0u))] = i32(select(win, 0u, is_nan_bits(first)));
#else
            dst[t_idx(DST, vec4<u32>(rank, r.y, r.z, r.w))] = i32(win);
#endif
#endif
        }
        workgroupBarrier();
    }
}
