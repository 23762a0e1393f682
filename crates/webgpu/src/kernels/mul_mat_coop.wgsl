// Matrix × matrix (prefill) on cooperative matrices (tensor cores): dst[m, n, i2, i3] = sum_k
// src0[k, m, a2, a3] * src1[k, n, i2, i3], f16 operands and f32 accumulation, by output tiles of BM
// = 128 weight rows × BN activation columns. A workgroup is BM / 32 subgroups of 32 (the planner
// checks the subgroup size), BM invocations; subgroup s owns the 64 × BN/2 block at rows 64 (s %
// (BM / 64)), columns BN/2 (s / (BM / 64)) of the tile: 4 × BN/32 accumulators of 16 × 16. Per 16
// along k a subgroup loads 4 + BN/32 operand matrices for 4 · BN/32 products: 16 products for 8
// loads at BN = 128, 8 for 6 at BN = 64 (blocks of 32 rows did 8 for 6 and 4 for 4).
//
// Steps of BK = 32 along k (one unit of 32 weights per row). Workgroup memory holds one step as
// f16, row by row with k fastest and rows padded to SK = 40 halves (80-byte rows: the 16-byte row
// pieces a 16 × 16 load reads fall in distinct banks). One stage: two (one barrier a step instead
// of two) fit 48 KiB at 128 rows but ran slower. Each invocation fetches the next step into
// registers while the current step's products run: NX = 8 BN / BM activation vec4s before them
// (kept as f32 until stored), its four weight parts (rows lid / 4 + BM / 4 j, part lid % 4) decoded
// to f16 through quant_part.wgsl's `partq` or `part` after the first half of them, so a decoder
// that waits on its loads waits behind half the products at least (f16 weights, loaded as they are,
// before them). The loop body has no branches but constant ones, so the compiler may move the
// decoding later still. After a barrier the registers go to workgroup memory, and a second barrier
// opens the next products. Rows and columns past the result are loaded clamped to the last one
// (their products land in rows or columns that are never stored), and the last step loads itself
// again: every invocation runs the same straight-line code.
//
// Results go straight from the accumulators to dst (column-major: dst's rows m are contiguous)
// when the tile lies inside the result and dst's columns are 16-byte aligned; edge tiles pass
// each accumulator through workgroup memory and store the elements inside the result.
// Values beyond f16's range (65504) become infinite in the operands: activations of that size
// do not reach matrix products in the models this runs.
// src1 is bound as vec4s (offset and column stride whole vec4s; the planner checks). f16
// weights are bound as vec4<f16> (rows on 8-byte boundaries; the planner checks): a part is two
// 8-byte loads stored as they are (bound as words, each value would be converted to f32 and
// back). They are staged through workgroup memory: a cooperative load straight from a storage
// buffer (coopLoadT) is per-lane loads, and slower.
// Split k: with op_u(7) = S > 1 splits (a single batch, K / 32 a multiple of S), workgroup z
// is split s, which sums steps s K / (32 S) .. of K / (32 S) into dst's slice s (dst is then
// f32 scratch [M, N, S]; `mul_mat_split.wgsl` adds the slices into the result). Products of
// few tiles over long rows then keep more workgroups in flight than one per compute unit.
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2, 4 = r3, 5 = tiles along m, 6 = tiles along n when the
// tiles go along n first, else 0; 7 = splits (0 or 1: none). Workgroup z indexes the batch
// and the split.
// With ID (mul_mat_id; see mul_mat_routes.wgsl) workgroup z is an expert's bucket of routed
// columns, which the tiles along n (op_u(6), taken n first) step over; no split, and every
// tile stores through workgroup memory (its columns are scattered in dst).
// With INIT the sums start from the adds fused into the product (`ops::matmul::CoopEpilogue`): a
// bias per weight row (BIAS) and a residual of dst's shape (RES), each accumulator loaded once
// through workgroup memory before the first step; the add's own pass over the result goes.
// With ACT (an activation read only by the product, fused too; no split) each sum is stored
// as the activation of it, every tile through workgroup memory.

#if U_F16
#else
fn ldw(i: u32) -> u32 {
    return src0[i];
}
#endif

// The descriptor slot of dst (after the addends).
const DST: u32 = {{DST}}u;
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = 32u;
const SK: u32 = 40u;
// Columns of one subgroup's block.
const WN: u32 = BN / 2u;

// Workgroup memory in vec4s of f16 (one 8-byte store per four values, where f16 scalars took
// four stores; the cooperative loads count their offset and stride in vec4s): a_sh[(r * SK + k)
// / 4] holds weight row m0 + r at depths k0 + k .. + 3; b_sh likewise for column n0 + c.
const SK4: u32 = SK / 4u;
var<workgroup> a_sh: array<vec4<f16>, BM * SK4>;
var<workgroup> b_sh: array<vec4<f16>, BN * SK4>;
// One 16 × 16 accumulator per subgroup on its way to an edge tile's elements.
var<workgroup> c_sh: array<f32, BM * 8u>;

// `i` is a multiple of 4 (in f16s).
fn put_a(i: u32, h: vec4<f16>) {
    a_sh[i / 4u] = h;
}

// `wpart(row, u, p)`: part p of unit u of the weight row at `row` as a step's loads leave it
// in registers, as f16; `put_w(s, xp, w)` stores it to a_sh at s + xp.x (values 4 xpair(p).x
// .. + 3 of the unit) and s + xp.y.
alias WPart = array<vec4<f16>, 2>;

#if U_F16
// f16 weights: values 8p .. 8p + 7 of the unit (xpair(p) = (2p, 2p + 1)) as loaded.
fn xpair(p: u32) -> vec2<u32> {
    return vec2<u32>(2u * p, 2u * p + 1u);
}

fn wpart(row: u32, u: u32, p: u32) -> WPart {
    let w = (row + 32u * u + 8u * p) / 4u;
    return WPart(src0[w], src0[w + 1u]);
}
#else
// Other formats: decoded to f16.

#if U_INTQ
// The four signed bytes of w as f32 with no integer-to-float conversion (CUDA's throughput
// table gives conversions 16 results per clock and multiprocessor on recent NVIDIA GPUs, f32
// adds 128, and a step converts 32 values per weight row): byte b, biased to b + 128, goes
// into the low mantissa bits of 2^23, and 2^23 + 128 is subtracted.
fn bytes_f(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
    return bitcast<vec4<f32>>(b ^ vec4<u32>(0x4b000080u)) - 8388736.0;
}

// `part` (d · q + m) from the integer decoder's quants.
fn wpart(row: u32, u: u32, p: u32) -> WPart {
    let q = partq(row, u, p);
    return WPart(vec4<f16>(bytes_f(q.qa) * q.d + q.m), vec4<f16>(bytes_f(q.qb) * q.d + q.m));
}
#else
fn wpart(row: u32, u: u32, p: u32) -> WPart {
    let v = part(row, u, p);
    return WPart(vec4<f16>(v[0]), vec4<f16>(v[1]));
}
#endif
#endif

fn put_w(s: u32, xp: vec2<u32>, w: WPart) {
    put_a(s + xp.x, w[0]);
    put_a(s + xp.y, w[1]);
}

fn put_b(i: u32, v: vec4<f32>) {
    b_sh[i / 4u] = vec4<f16>(v);
}

// A sum as it is stored: with ACT, the activation of it.
fn finish(x: f32) -> f32 {
#if ACT
    return {{ACT}};
#else
    return x;
#endif
}

#if INIT
// What the sums of result element (m, n) of batch (i2, i3) start from: the bias of row m
// (BIAS, src2) plus the residual's element (RES).
fn addend(m: u32, n: u32, i2: u32, i3: u32) -> f32 {
    var v = 0.0;
#if BIAS
    v += load_src2(t_idx(2u, vec4<u32>(m, 0u, 0u, 0u)));
#endif
#if RES
    v += load_src{{RES}}(t_idx({{RES}}u, vec4<u32>(m, n, i2, i3)));
#endif
    return v;
}
#endif

@compute @workgroup_size(BM)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    // Tiles along m first, or along n first where op_u(6) gives the tiles along n.
    let g = group_id(wid, nwg);
    let tiles_m = op_u(5u);
    let tiles_n = op_u(6u);
    var mt = g % tiles_m;
    var nt = g / tiles_m;
    if (tiles_n > 0u) {
        mt = g / tiles_n;
        nt = g % tiles_n;
    }
    let m0 = mt * BM;
    let k_len = op_u(0u);
    let m_len = op_u(1u);
#if ID
    // Routed columns (mul_mat_routes.wgsl): bucket bk's, the tiles along n stepping over them.
    let bk = wid.z;
    let n_len = route_len(bk, lid);
    let sp = 0u;
    let i2 = 0u;
    let i3 = 0u;
    let a2 = min(bk, t_ne(0u, 2u) - 1u);
    let a3 = 0u;
    let steps = k_len / BK;
    let s0 = 0u;
    for (var n0 = nt * BN; n0 < n_len; n0 += tiles_n * BN) {
        if (bk == op_u(3u)) {
            route_nan(lid, BM, m0, BM, n0, BN, n_len);
            continue;
        }
#else
    let n0 = nt * BN;
    let n_len = op_u(2u);
    // Split k (op_u(7) splits): workgroup z is split sp, steps s0 .., of batch bz; a split's
    // sum goes to dst's slice i2 + sp (the planner splits single products only).
    let splits = max(op_u(7u), 1u);
    let sp = wid.z % splits;
    let bz = wid.z / splits;
    let i2 = bz % t_ne(1u, 2u);
    let i3 = bz / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);
    let steps = k_len / BK / splits;
    let s0 = sp * steps;
    {
#endif

        // Weight loaders: part lid % 4 of rows lid / 4 + BM / 4 j of the tile (four neighbouring
        // invocations read one unit), stored at a_s_j + 4 xp.
        let p = lid % 4u;
        let xp = 4u * xpair(p);
#unroll j 4
        let a_m_$j = min(m0 + lid / 4u + (BM / 4u) * $ju, m_len - 1u);
        let a_row_$j = t_idx(0u, vec4<u32>(0u, a_m_$j, a2, a3));
        let a_s_$j = (lid / 4u + (BM / 4u) * $ju) * SK;
        var w_$j = wpart(a_row_$j, s0, p);
#endunroll
        // Activation loaders: vec4 lid % 8 (depths 4 (lid % 8) ..) of columns lid / 8 + BM / 8 j.
        let kv = lid % 8u;
#unroll j NX
        let b_n_$j = min(n0 + lid / 8u + (BM / 8u) * $ju, n_len - 1u);
#if ID
        let b_col_$j = route_src1(route_col(bk, b_n_$j)) + kv + 8u * s0;
#else
        let b_col_$j = t_idx(1u, vec4<u32>(0u, b_n_$j, i2, i3)) / 4u + kv + 8u * s0;
#endif
        let b_s_$j = (lid / 8u + (BM / 8u) * $ju) * SK + 4u * kv;
        var x_$j = src1[b_col_$j];
#endunroll

        let wm = 64u * (sid % (BM / 64u));
        let wn = WN * (sid / (BM / 64u));
#unroll i 4
#unroll j NF
        var acc_$i_$j = coop_mat16x16<f32, C>();
#endunroll
#endunroll
#if INIT
        // Split 0's sums start from the addends (the other splits' from 0), each accumulator
        // loaded from this subgroup's 16 × 16 of c_sh; rows and columns past the result read
        // the last one's (they are never stored).
        if (sp == 0u) {
            let c0 = 256u * sid;
#unroll i 4
#unroll j NF
            for (var e = lane; e < 256u; e += 32u) {
                let m = min(m0 + wm + 16u * $iu + e % 16u, m_len - 1u);
                let n = min(n0 + wn + 16u * $ju + e / 16u, n_len - 1u);
                c_sh[c0 + e] = addend(m, n, i2, i3);
            }
            workgroupBarrier();
            acc_$i_$j = coopLoad<coop_mat16x16<f32, C>>(&c_sh[c0], 16u);
            workgroupBarrier();
#endunroll
#endunroll
        }
#endif

#unroll j 4
        put_w(a_s_$j, xp, w_$j);
#endunroll
#unroll j NX
        put_b(b_s_$j, x_$j);
#endunroll
        workgroupBarrier();

        for (var t = 0u; t < steps; t++) {
            // The next step into registers (the last step once more at the end): activations and
            // f16 weights (loads alone) first, decoded weights between the two product halves.
            let un = min(t + 1u, steps - 1u);
            let wu = s0 + un;
#unroll j NX
            x_$j = src1[b_col_$j + 8u * un];
#endunroll
#if U_F16
#unroll j 4
            w_$j = wpart(a_row_$j, wu, p);
#endunroll
#endif
#unroll h 2
#if U_F16
#else
            if ($hu == 1u) {
#unroll j 4
                w_$j = wpart(a_row_$j, wu, p);
#endunroll
            }
#endif
            {
#unroll i 4
                let ia_$i = (wm + 16u * $iu) * SK4 + 4u * $hu;
                let fa_$i = coopLoadT<coop_mat16x16<f16, A>>(&a_sh[ia_$i], SK4);
#endunroll
#unroll j NF
                let ib_$j = (wn + 16u * $ju) * SK4 + 4u * $hu;
                let fb_$j = coopLoad<coop_mat16x16<f16, B>>(&b_sh[ib_$j], SK4);
#unroll i 4
                acc_$i_$j = coopMultiplyAdd(fa_$i, fb_$j, acc_$i_$j);
#endunroll
#endunroll
            }
#endunroll
            workgroupBarrier();
#unroll j 4
            put_w(a_s_$j, xp, w_$j);
#endunroll
#unroll j NX
            put_b(b_s_$j, x_$j);
#endunroll
            workgroupBarrier();
        }

#if ID
        {
#else
        let dnb = t_nb(DST, 1u);
        let whole = m0 + BM <= m_len && n0 + BN <= n_len;
        // With ACT every tile stores element by element (the activation of each sum).
#if ACT
        let direct = false;
#else
        let direct = whole && dnb % 4u == 0u && t_off(DST) % 4u == 0u;
#endif
        if (direct) {
#unroll i 4
#unroll j NF
            let o_$i_$j =
                t_idx(DST, vec4<u32>(m0 + wm + 16u * $iu, n0 + wn + 16u * $ju, i2 + sp, i3));
            coopStore(acc_$i_$j, &dst[o_$i_$j], dnb);
#endunroll
#endunroll
        } else {
#endif
            let c0 = 256u * sid;
#unroll i 4
#unroll j NF
            coopStore(acc_$i_$j, &c_sh[c0], 16u);
            workgroupBarrier();
            for (var e = lane; e < 256u; e += 32u) {
                let m = m0 + wm + 16u * $iu + e % 16u;
                let n = n0 + wn + 16u * $ju + e / 16u;
                if (m < m_len && n < n_len) {
#if ID
                    store_dst(route_dst(m, route_col(bk, n)), c_sh[c0 + e]);
#else
                    store_dst(t_idx(DST, vec4<u32>(m, n, i2 + sp, i3)), finish(c_sh[c0 + e]));
#endif
                }
            }
            workgroupBarrier();
#endunroll
#endunroll
        }
    }
}
