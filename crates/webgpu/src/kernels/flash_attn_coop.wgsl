// ggml_flash_attn_ext for many query rows (prefill) on cooperative matrices (tensor cores):
// same math and bindings as `flash_attn.wgsl` (which see), with f16 K and V read as vec4<u32>
// words (rows of whole 16-byte words; the planner checks), q and the probabilities rounded to
// f16, sums in f32. A workgroup takes BQ = 64 query rows of one head (workgroup g: block
// g % blocks, head (g / blocks) % n_head, batch g / (blocks · n_head)); subgroup s (of four,
// 32 lanes each) owns rows 16 s .. 16 s + 15 of the block, its qᵀ as D / 16 B fragments held
// in registers for the whole walk. The products run transposed (Sᵀ = K qᵀ, Oᵀ = Vᵀ Pᵀ): every
// fragment load and store is then of the forms the coop product kernel uses (A row-major, B
// and results column-major), and every array a fragment is loaded from holds vec4s of f16,
// as there: other layouts (f16 and vec2<f16> arrays, an atomic key mask) gave rows of NaN and
// wrong scores on a driver; this one gives the f16 rounding alone.
//
// The keys go in tiles of BK = 32 (their K, then V transposed, in workgroup memory as f16),
// twice:
//   1. Scores Sᵀ = K qᵀ (16 × 16 products into two accumulators per subgroup, stored to
//      workgroup memory), then the row maxima: lane j of a subgroup takes key j of the tile
//      for each of its 16 rows and keeps its own running maximum; the lanes are merged at the
//      end (with the sink), which gives each row its final maximum m.
//   2. The scores again, p = exp(s - m) written as f16 (against the row's final maximum:
//      nothing is rescaled later) and summed by each lane into l, then V, then O += P V into
//      DV / 16 accumulators per subgroup, which end as the output times l and go to dst
//      through workgroup memory, divided by l there (the lanes' sums merged, the sink's term
//      added). p stays in [0, 1] with its largest 1: normalized, the probabilities of rows
//      over tens of thousands of keys fall below f16's normal range (6.1e-5), where a device
//      that flushes subnormals would drop them.
// Computing q Kᵀ twice costs less than the rescaling of O an online softmax needs, which the
// accumulators (opaque to the invocations) do not allow; the first pass takes no exp at all (one a
// score in all, where a running sum there took three).
// Scaling, softcap and mask are applied to the scores in f32 as `flash_attn.wgsl` does. V rows that
// no row of the block sees are zeroed before they are stored (a ballot of the lanes that saw their
// key), so NaN in a cache's unwritten rows cannot reach the output through 0 · NaN. As
// `flash_attn_tile.wgsl`, the block's mask is scanned first for the first and last key any row sees
// (`flash_attn_range.wgsl`), and only the tiles between run.
// Rows past n_q score nothing and are not stored; keys past n_kv are loaded clamped and score
// NEG.

const BQ: u32 = 64u;
const BK: u32 = 32u;
const WG: u32 = 128u;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
// Row stride of K (and of q, staged there first) in workgroup memory, in vec4<f16>s: 8 halves
// past a row, so a fragment's rows start in different banks.
const KS4: u32 = D / 4u + 2u;
// Row stride of Vᵀ (f16): a row per value of the head, a column per key.
const VTS: u32 = BK + 8u;
// Row stride of the probabilities (f16).
const PS: u32 = BK + 8u;
const NEG: f32 = -3.402823e38;

var<workgroup> k_sh: array<vec4<f16>, BQ * KS4>;
// In vec4s of f16, as every array the fragments are loaded from.
var<workgroup> vt_sh: array<vec4<f16>, DV * VTS / 4u>;
// Scores, row r of the block at r * BK; at the end the outputs on their way to dst.
var<workgroup> s_sh: array<f32, BQ * BK>;
var<workgroup> p_sh: array<vec4<f16>, BQ * PS / 4u>;
// Keys of the tile that some row of each subgroup sees (bit per key).
var<workgroup> vis: array<u32, 4>;

// The four f16 values of two words (naga has no bitcast from u32 words to f16 vectors).
fn halves(w: vec2<u32>) -> vec4<f16> {
    return vec4<f16>(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let g = group_id(wid, nwg);
    // Past 65,535 blocks the grid is two rows, rounded up: the workgroups past the last block
    // have none.
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
    // K and V rows as vec4<u32> words (8 halves each).
    let krow0 = t_idx(1u, vec4<u32>(0u, 0u, h / op_u(6u), b)) / 8u;
    let knb1 = t_nb(1u, 1u) / 8u;
    let vrow0 = t_idx(2u, vec4<u32>(0u, 0u, h / op_u(7u), b)) / 8u;
    let vnb1 = t_nb(2u, 1u) / 8u;
    let scale = op_f(0u);
    let softcap = op_f(5u);

#if MASK
    let mnb0 = t_nb(3u, 0u);
    let mnb1 = t_nb(3u, 1u);
    let slope = alibi(h);
    let mrow0 = t_idx(3u, vec4<u32>(0u, 0u, h % t_ne(3u, 2u), b % t_ne(3u, 3u)));
    let kv = seen_range(lid, min(BQ, n_q - q0), n_kv, mrow0 + q0 * mnb1, mnb0, mnb1);
    let kv_first = kv.x / BK * BK;
    let kv_end = kv.y;
#else
    let kv_first = 0u;
    let kv_end = n_kv;
#endif

    // qᵀ as f16 fragments, through k_sh (whose 64 rows hold the block's q first).
    for (var i = lid; i < BQ * (D / 4u); i += WG) {
        let row = i / (D / 4u);
        let c = 4u * (i % (D / 4u));
        let at = t_idx(0u, vec4<u32>(c, min(q0 + row, n_q - 1u), h, b));
        let nb0 = t_nb(0u, 0u);
        k_sh[row * KS4 + c / 4u] = vec4<f16>(vec4<f32>(load_src0(at), load_src0(at + nb0),
            load_src0(at + 2u * nb0), load_src0(at + 3u * nb0)));
    }
    workgroupBarrier();
#unroll i NQ
    let qa_$i = 16u * sid * KS4 + 4u * $iu;
    let qf_$i = coopLoad<coop_mat16x16<f16, B>>(&k_sh[qa_$i], KS4);
#endunroll

    // Row statistics of lane `lane`'s keys: maxima (pass 1, then each row's m), sums of p (pass
    // 2, then each row's 1 / l).
#unroll r 16
    var mr_$r = NEG;
    var lr_$r = 0.0;
#endunroll
#if SINKS
    let sink = load_src4(t_idx(4u, vec4<u32>(h, 0u, 0u, 0u)));
#endif
    let srow = 16u * sid;
    // This subgroup's rows of the output.
#unroll j NO
    var o_$j = coop_mat16x16<f32, C>();
#endunroll

#unroll pass 2
    for (var t0 = kv_first; t0 < kv_end; t0 += BK) {
        // This lane's mask terms of the tile (key t0 + lane of its 16 rows, clamped into the
        // mask), issued first so they arrive while K loads and the scores run.
        let key = t0 + lane;
#unroll r 16
#if MASK
        let mv_$r = slope * load_src3(mrow0 + min(q0 + srow + $ru, n_q - 1u) * mnb1
            + min(key, n_kv - 1u) * mnb0);
#else
        let mv_$r = 0.0;
#endif
#endunroll
        // K of the tile (keys past n_kv clamped to the last): word kp (8 halves) of key kc, all
        // of an invocation's loads issued before the barrier that frees k_sh (the loop this was
        // waited on each load in turn), stored after it.
#unroll j KL
        let ki_$j = lid + WG * $ju;
        let kc_$j = ki_$j / (D / 8u);
        let kp_$j = ki_$j % (D / 8u);
        var kw_$j = vec4<u32>(0u);
        if (ki_$j < BK * (D / 8u)) {
            kw_$j = src1[krow0 + min(t0 + kc_$j, n_kv - 1u) * knb1 + kp_$j];
        }
#endunroll
        // In the second pass Vᵀ's loads too (word vp of keys vc .. vc + 3, clamped; zeroed below
        // where no row sees the key).
        let vc = 4u * (lid / (DV / 8u));
        let vp = lid % (DV / 8u);
        let v_ok = lid < (BK / 4u) * (DV / 8u);
#unroll t 4
        var w_$t = vec4<u32>(0u);
        if ($passu == 1u && v_ok) {
            w_$t = src2[vrow0 + min(t0 + vc + $tu, n_kv - 1u) * vnb1 + vp];
        }
#endunroll
        workgroupBarrier();
#unroll j KL
        if (ki_$j < BK * (D / 8u)) {
            k_sh[kc_$j * KS4 + 2u * kp_$j] = halves(kw_$j.xy);
            k_sh[kc_$j * KS4 + 2u * kp_$j + 1u] = halves(kw_$j.zw);
        }
#endunroll
        workgroupBarrier();
        {
#unroll j 2
            var s_$j = coop_mat16x16<f32, C>();
#endunroll
#unroll i NQ
#unroll j 2
            let ka_$i_$j = 16u * $ju * KS4 + 4u * $iu;
            s_$j = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&k_sh[ka_$i_$j], KS4),
                qf_$i, s_$j);
#endunroll
#endunroll
#unroll j 2
            let so_$j = srow * BK + 16u * $ju;
            coopStore(s_$j, &s_sh[so_$j], BK);
#endunroll
        }
        workgroupBarrier();
        // Row r's score of key `key` for the 16 rows, straight-line (no branch a row, so every
        // row's loads issue together): NEG where the key is past n_kv, the row past n_q or the
        // mask -inf. tanh (softcap) is exactly ±1 in f32 beyond ±9.1; the clamp keeps exp-based
        // tanh finite.
#unroll r 16
        var s_$r = s_sh[(srow + $ru) * BK + lane] * scale;
#endunroll
        if (softcap != 0.0) {
#unroll r 16
            s_$r = softcap * tanh(clamp(s_$r, -10.0, 10.0));
#endunroll
        }
#unroll r 16
        s_$r = select(NEG, s_$r + mv_$r, key < n_kv && q0 + srow + $ru < n_q && mv_$r >= NEG);
#endunroll
        var seen = false;
        if ($passu == 0u) {
#unroll r 16
            mr_$r = max(mr_$r, s_$r);
#endunroll
        } else {
            // Here mr is the row's maximum. Each lane stores its probability as one half of
            // the row's vec4s (no shuffles to gather four in one lane).
#unroll r 16
            {
                let p = select(0.0, exp(s_$r - mr_$r), s_$r > NEG);
                lr_$r += p;
                p_sh[((srow + $ru) * PS + lane) / 4u][lane % 4u] = f16(p);
                seen = seen | (s_$r > NEG);
            }
#endunroll
        }
        if ($passu == 1u) {
            let bits = subgroupBallot(seen).x;
            if (lane == 0u) {
                vis[sid] = bits;
            }
            workgroupBarrier();
            // Vᵀ of the tile, zero for keys no row sees (a cache's unwritten rows may hold
            // NaN): an invocation takes word vp (values 8 vp .. 8 vp + 7) of four neighbouring
            // keys' rows and stores each value's four.
            let seen_keys = vis[0] | vis[1] | vis[2] | vis[3];
            if (v_ok) {
#unroll t 4
                w_$t = select(vec4<u32>(0u), w_$t, ((seen_keys >> (vc + $tu)) & 1u) != 0u);
#endunroll
                let at = (8u * vp * VTS + vc) / 4u;
#unroll e 4
                {
                    let a_$e = unpack2x16float(w_0[$eu]);
                    let b_$e = unpack2x16float(w_1[$eu]);
                    let c_$e = unpack2x16float(w_2[$eu]);
                    let d_$e = unpack2x16float(w_3[$eu]);
                    vt_sh[at + 2u * $eu * (VTS / 4u)] = vec4<f16>(vec4<f32>(a_$e.x, b_$e.x, c_$e.x, d_$e.x));
                    vt_sh[at + (2u * $eu + 1u) * (VTS / 4u)] = vec4<f16>(vec4<f32>(a_$e.y, b_$e.y, c_$e.y, d_$e.y));
                }
#endunroll
            }
            workgroupBarrier();
#unroll kk 2
            {
                let pa_$kk = (srow * PS + 16u * $kku) / 4u;
                let pf_$kk = coopLoad<coop_mat16x16<f16, B>>(&p_sh[pa_$kk], PS / 4u);
#unroll j NO
                let va_$kk_$j = (16u * $ju * VTS + 16u * $kku) / 4u;
                o_$j = coopMultiplyAdd(
                    coopLoadT<coop_mat16x16<f16, A>>(&vt_sh[va_$kk_$j], VTS / 4u), pf_$kk, o_$j);
#endunroll
            }
#endunroll
        }
    }
    if ($passu == 0u) {
        // Merge the lanes: the row's maximum (the sink's if larger).
#unroll r 16
#if SINKS
        mr_$r = max(subgroupMax(mr_$r), sink);
#else
        mr_$r = subgroupMax(mr_$r);
#endif
#endunroll
    }
#endunroll
    // Merge the lanes' sums (and the sink's term): 1 / l, 0 for a row that saw nothing.
#unroll r 16
    {
#if SINKS
        let l = subgroupAdd(lr_$r) + exp(sink - mr_$r);
#else
        let l = subgroupAdd(lr_$r);
#endif
        lr_$r = select(1.0 / l, 0.0, l == 0.0);
    }
#endunroll

    // The output rows through workgroup memory (each subgroup's strip of s_sh), divided by
    // their l and stored element by element.
    var inv: array<f32, 16>;
#unroll r 16
    inv[$ru] = lr_$r;
#endunroll
#unroll j NO
    workgroupBarrier();
    let ob_$j = srow * BK;
    coopStore(o_$j, &s_sh[ob_$j], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += 32u) {
        let row = q0 + srow + e / 16u;
        if (row < n_q) {
            let o = s_sh[srow * BK + e] * inv[e / 16u];
            store_dst(t_idx(5u, vec4<u32>(16u * $ju + e % 16u, h, row, b)), o);
        }
    }
#endunroll
}
