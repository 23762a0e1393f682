// ggml_flash_attn_ext for many query rows (prefill), by tiles: a workgroup takes BQ query rows
// of one head (workgroup g: block g % blocks, head (g / blocks) % n_head, batch g / (blocks ·
// n_head)) and walks the keys in tiles of BK = 16, each K and V tile read once into workgroup
// memory for all BQ rows (`flash_attn.wgsl`, a workgroup a row, reads every key once a row).
// Same math and bindings as `flash_attn.wgsl` (which see), f32 throughout, unsplit.
//
// Invocation t owns rows 2 (t / 8) and 2 (t / 8) + 1 of the block (WG = 4 BQ): for scores keys
// 2 (t % 8) and + 1 of a tile (a 2 × 2 block of q · k from workgroup memory, vec4 by vec4), for
// the output the vec4 columns t % 8 + 8 i. Per tile, three phases between barriers:
//   1. K and the mask tile into workgroup memory (scores start as slope · mask, or NEG where
//      the mask is -inf); per key and group of four rows, whether any of them sees the key.
//   2. V into workgroup memory, zeroed for keys no row of the block sees (so NaN in a cache's
//      unwritten rows cannot reach the output through 0 · NaN); the 2 × 2 scores.
//   3. The online softmax: each invocation takes its rows' maxima over the tile (from the
//      scores in workgroup memory), rescales its outputs and its partial row sums, and writes
//      its four probabilities; then, after a barrier, the output += P · V.
// Phase 1 of the next tile overlaps phase 3's products (they touch other arrays).
// Before the walk, the block's mask is scanned for the first and last key any row sees
// (`flash_attn_range.wgsl`), and only the tiles between run: a causal prefill skips the upper
// triangle, a window what lies before it. The row sums are summed over the row's eight
// invocations at the end.
// lavapipe (llvmpipe) gives a shader invocation 65,535 loop iterations in all and silently
// ends every loop past them: one block's walk there stops early past ~15,000 keys with heads
// of 128 (~25,000 with 64; a tile costs ~70 of them), which GPUs compute right. The op table
// stays under it.
// Keys past n_kv are loaded clamped and scored NEG. Workgroup memory: 16 (BQ + BK) (D / 4 + 1)
// + 4 BK DV + 9 BQ BK + 48 bytes (`tile_storage` in ops/attention.rs; WebGPU counts each
// variable rounded up to 16 bytes: flash_attn_range.wgsl's three take 48).

const BQ: u32 = {{BQ}}u;
const BK: u32 = 16u;
const WG: u32 = 4u * BQ;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const D4: u32 = D / 4u;
// Row stride of q and K in workgroup memory (vec4s): one more than a row, so the rows a
// subgroup reads together start in different banks.
const QS: u32 = D4 + 1u;
const DV4: u32 = DV / 4u;
// Output vec4s an invocation keeps per row.
const NO: u32 = {{NO}}u;
// Groups of four block rows (phase 1's mask loaders).
const RG: u32 = BQ / 4u;
const NEG: f32 = -3.402823e38;

var<workgroup> qsh: array<vec4<f32>, BQ * QS>;
var<workgroup> ksh: array<vec4<f32>, BK * QS>;
var<workgroup> vsh: array<vec4<f32>, BK * DV4>;
// The tile's scores (masked ones NEG) and probabilities; row r at r * BK.
var<workgroup> ssh: array<f32, BQ * BK>;
var<workgroup> psh: array<f32, BQ * BK>;
// live[g * BK + c]: some row of group g sees key c of the tile.
var<workgroup> live: array<u32, RG * BK>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    // Past 65,535 blocks the grid is two rows, rounded up: the workgroups past the last block
    // have none (their b would be past the batch, their stores past dst).
    if (g >= n_items()) {
        return;
    }
    let n_head = t_ne(0u, 2u);
    let n_q = t_ne(0u, 1u);
    let blocks = (n_q + BQ - 1u) / BQ;
    let qb = g % blocks;
    let h = (g / blocks) % n_head;
    let b = g / (blocks * n_head);
    let n_kv = t_ne(1u, 1u);
    let q0 = qb * BQ;
    let krow0 = t_idx(1u, vec4<u32>(0u, 0u, h / op_u(6u), b));
    let knb1 = t_nb(1u, 1u);
    let vrow0 = t_idx(2u, vec4<u32>(0u, 0u, h / op_u(7u), b));
    let vnb1 = t_nb(2u, 1u);
    let scale = op_f(0u);
    let softcap = op_f(5u);

    // q, scaled, into workgroup memory (rows past n_q repeat the last).
    for (var i = lid; i < BQ * D4; i += WG) {
        let r = i / D4;
        let c = 4u * (i % D4);
        let iq = min(q0 + r, n_q - 1u);
        let at = t_idx(0u, vec4<u32>(c, iq, h, b));
        let nb0 = t_nb(0u, 0u);
        qsh[r * QS + i % D4] = scale * vec4<f32>(load_src0(at), load_src0(at + nb0),
            load_src0(at + 2u * nb0), load_src0(at + 3u * nb0));
    }

#if MASK
    let mnb0 = t_nb(3u, 0u);
    let slope = alibi(h);
    let mrow0 = t_idx(3u, vec4<u32>(0u, 0u, h % t_ne(3u, 2u), b % t_ne(3u, 3u)));
    let mnb1 = t_nb(3u, 1u);
    let kv = seen_range(lid, min(BQ, n_q - q0), n_kv, mrow0 + q0 * mnb1, mnb0, mnb1);
    let kv_first = kv.x / BK * BK;
    let kv_end = kv.y;
#else
    let kv_first = 0u;
    let kv_end = n_kv;
#endif

    let rp = lid / 8u;
    let kp = lid % 8u;
    let r0 = 2u * rp;
    var m = vec2<f32>(NEG);
    // This invocation's share of each row's sum: its keys' probabilities.
    var lp = vec2<f32>(0.0);
#unroll i NO
    var acc0_$i = vec4<f32>(0.0);
    var acc1_$i = vec4<f32>(0.0);
#endunroll

    for (var t0 = kv_first; t0 < kv_end; t0 += BK) {
        // Phase 1: K and the mask tile.
        for (var i = lid; i < BK * D4; i += WG) {
            let c = i / D4;
            let e = 4u * (i % D4);
            let row = krow0 + min(t0 + c, n_kv - 1u) * knb1;
            ksh[c * QS + i % D4] = vec4<f32>(k_at(row, e), k_at(row, e + 1u), k_at(row, e + 2u),
                k_at(row, e + 3u));
        }
        {
            // Key c of rows lid / BK + RG j (j < 4).
            let c = lid % BK;
            let grp = lid / BK;
            let key = t0 + c;
            var seen = false;
            // The four mask loads first (clamped into the mask), all in flight together.
#unroll j 4
            let r_$j = grp + RG * $ju;
            let in_$j = key < n_kv && q0 + r_$j < n_q;
#if MASK
            let mv_$j = slope * load_src3(mrow0 + min(q0 + r_$j, n_q - 1u) * mnb1
                + min(key, n_kv - 1u) * mnb0);
#else
            let mv_$j = 0.0;
#endif
#endunroll
#unroll j 4
            {
                var s = NEG;
                if (in_$j && mv_$j >= NEG) {
                    s = mv_$j;
                }
                seen = seen || s > NEG;
                ssh[r_$j * BK + c] = s;
            }
#endunroll
            live[grp * BK + c] = select(0u, 1u, seen);
        }
        workgroupBarrier();

        // Phase 2: V (zeroed for keys no row sees) and the scores.
        for (var i = lid; i < BK * DV4; i += WG) {
            let c = i / DV4;
            let e = 4u * (i % DV4);
            var seen = 0u;
            for (var j = 0u; j < RG; j++) {
                seen |= live[j * BK + c];
            }
            var v = vec4<f32>(0.0);
            if (seen != 0u) {
                let row = vrow0 + (t0 + c) * vnb1;
                v = vec4<f32>(v_at(row, e), v_at(row, e + 1u), v_at(row, e + 2u),
                    v_at(row, e + 3u));
            }
            vsh[i] = v;
        }
        {
            let c0 = 2u * kp;
            var d00 = 0.0;
            var d01 = 0.0;
            var d10 = 0.0;
            var d11 = 0.0;
            for (var d = 0u; d < D4; d++) {
                let qa = qsh[r0 * QS + d];
                let qb = qsh[(r0 + 1u) * QS + d];
                let ka = ksh[c0 * QS + d];
                let kb = ksh[(c0 + 1u) * QS + d];
                d00 += dot(qa, ka);
                d01 += dot(qa, kb);
                d10 += dot(qb, ka);
                d11 += dot(qb, kb);
            }
            var x = vec4<f32>(d00, d01, d10, d11);
            if (softcap != 0.0) {
                // tanh is exactly ±1 in f32 beyond ±9.1; the clamp keeps exp-based tanh finite.
                x = softcap * tanh(clamp(x, vec4<f32>(-10.0), vec4<f32>(10.0)));
            }
            let i00 = r0 * BK + c0;
            let i10 = i00 + BK;
            let sm = vec4<f32>(ssh[i00], ssh[i00 + 1u], ssh[i10], ssh[i10 + 1u]);
            // A masked score stays NEG whatever q · k is (NaN or infinite in unwritten rows).
            let s = select(x + sm, vec4<f32>(NEG), sm <= vec4<f32>(NEG));
            ssh[i00] = s.x;
            ssh[i00 + 1u] = s.y;
            ssh[i10] = s.z;
            ssh[i10 + 1u] = s.w;
        }
        workgroupBarrier();

        // Phase 3: the online softmax of this invocation's rows, then the output.
        {
            var mt = m;
            for (var c = 0u; c < BK; c++) {
                mt = max(mt, vec2<f32>(ssh[r0 * BK + c], ssh[(r0 + 1u) * BK + c]));
            }
            let alpha = exp(m - mt);
            m = mt;
            let c0 = 2u * kp;
            let i00 = r0 * BK + c0;
            let i10 = i00 + BK;
            let s = vec4<f32>(ssh[i00], ssh[i00 + 1u], ssh[i10], ssh[i10 + 1u]);
            let p = select(exp(s - vec4<f32>(mt.x, mt.x, mt.y, mt.y)), vec4<f32>(0.0),
                s <= vec4<f32>(NEG));
            psh[i00] = p.x;
            psh[i00 + 1u] = p.y;
            psh[i10] = p.z;
            psh[i10 + 1u] = p.w;
            lp = lp * alpha + vec2<f32>(p.x + p.y, p.z + p.w);
#unroll i NO
            acc0_$i *= alpha.x;
            acc1_$i *= alpha.y;
#endunroll
        }
        workgroupBarrier();
        for (var c = 0u; c < BK; c++) {
            let pa = psh[r0 * BK + c];
            let pb = psh[(r0 + 1u) * BK + c];
#unroll i NO
            {
                let v = vsh[c * DV4 + min(kp + 8u * $iu, DV4 - 1u)];
                acc0_$i += pa * v;
                acc1_$i += pb * v;
            }
#endunroll
        }
    }

    // Row sums: the eight invocations of a row pair add their shares, through psh once every
    // invocation is past its last products.
    workgroupBarrier();
    psh[r0 * 8u + kp] = lp.x;
    psh[(r0 + 1u) * 8u + kp] = lp.y;
    workgroupBarrier();
    var l = vec2<f32>(0.0);
    for (var j = 0u; j < 8u; j++) {
        l += vec2<f32>(psh[r0 * 8u + j], psh[(r0 + 1u) * 8u + j]);
    }
    var out_scale = vec2<f32>(0.0);
#if SINKS
    let sink = load_src4(t_idx(4u, vec4<u32>(h, 0u, 0u, 0u)));
    for (var r = 0u; r < 2u; r++) {
        if (sink > m[r]) {
            let ms = exp(m[r] - sink);
            out_scale[r] = ms;
            l[r] = l[r] * ms + 1.0;
        } else {
            out_scale[r] = 1.0;
            l[r] += exp(sink - m[r]);
        }
    }
#else
    out_scale = vec2<f32>(1.0);
#endif
    let inv = select(out_scale / l, vec2<f32>(0.0), l == vec2<f32>(0.0));
#unroll i NO
    {
        let c = 4u * (kp + 8u * $iu);
        if (c < DV) {
            for (var e = 0u; e < 4u; e++) {
                if (q0 + r0 < n_q) {
                    store_dst(t_idx(5u, vec4<u32>(c + e, h, q0 + r0, b)), acc0_$i[e] * inv.x);
                }
                if (q0 + r0 + 1u < n_q) {
                    store_dst(t_idx(5u, vec4<u32>(c + e, h, q0 + r0 + 1u, b)),
                        acc1_$i[e] * inv.y);
                }
            }
        }
    }
#endunroll
}
