// Matrix × matrix (prefill) on cooperative matrices (tensor cores): dst[m, n, i2, i3] =
// sum_k src0[k, m, a2, a3] * src1[k, n, i2, i3], f16 operands and f32 accumulation, by output
// tiles of BM = 128 weight rows × BN activation columns. A workgroup is 8 subgroups of 32
// (the planner checks the subgroup size); subgroup s owns the 32 × BN/2 block at rows
// 32 (s % 4), columns BN/2 (s / 4) of the tile: 2 × BN/32 accumulators of 16 × 16.
//
// Per step of BK = 32 along k (one unit of 32 weights per row), every invocation decodes two
// parts (8 values each) of weight rows with `part` (quant_part.wgsl: every format the tiled
// kernel reads) and loads BN/32 vec4s of activations; both are stored as f16 into one of two
// workgroup stages, row by row with k fastest and rows padded to SK = 40 halves (80-byte rows:
// the 16-byte row pieces a 16 × 16 load reads fall in distinct banks). Iteration t fetches step
// t into registers, multiplies the stage step t - 1 filled, then stores step t into the other
// stage: the loads are in flight during the products, and one barrier per step suffices (a
// stage is rewritten only after every subgroup passed the barrier following its products).
//
// Results go straight from the accumulators to dst (column-major: dst's rows m are contiguous)
// when the tile lies inside the result and dst's columns are 16-byte aligned; edge tiles pass
// each accumulator through workgroup memory and store the elements inside the result.
// Values beyond f16's range (65504) become infinite in the operands: activations of that size
// do not reach matrix products in the models this runs.
// src1 is bound as vec4s (offset and column stride whole vec4s; the planner checks).
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2, 4 = r3, 5 = tiles along m. Workgroup z indexes the batch.

fn ldw(i: u32) -> u32 {
    return src0[i];
}

const BM: u32 = 128u;
const BN: u32 = {{BN}}u;
const BK: u32 = 32u;
const SK: u32 = 40u;
// Columns of one subgroup's block.
const WN: u32 = BN / 2u;

// Two stages each: a_sh[stage * BM * SK + r * SK + k] is weight row m0 + r at depth k0 + k;
// b_sh likewise for activation column n0 + c.
var<workgroup> a_sh: array<f16, 2u * BM * SK>;
var<workgroup> b_sh: array<f16, 2u * BN * SK>;
// One 16 × 16 accumulator per subgroup on its way to an edge tile's elements.
var<workgroup> c_sh: array<f32, 2048>;

fn put_a(i: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    a_sh[i] = h.x;
    a_sh[i + 1u] = h.y;
    a_sh[i + 2u] = h.z;
    a_sh[i + 3u] = h.w;
}

fn put_b(i: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    b_sh[i] = h.x;
    b_sh[i + 1u] = h.y;
    b_sh[i + 2u] = h.z;
    b_sh[i + 3u] = h.w;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let g = group_id(wid, nwg);
    let tiles_m = op_u(5u);
    let m0 = (g % tiles_m) * BM;
    let n0 = (g / tiles_m) * BN;
    let k_len = op_u(0u);
    let m_len = op_u(1u);
    let n_len = op_u(2u);
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);

    // Weight loaders: part lid % 4 of rows lid / 4 and lid / 4 + 64 of the tile (four
    // neighbouring invocations read one unit).
    let p = lid % 4u;
    let xp = 4u * xpair(p);
#unroll j 2
    let ar_$j = lid / 4u + 64u * $ju;
    let a_ok_$j = m0 + ar_$j < m_len;
    var a_row_$j = 0u;
    if (a_ok_$j) {
        a_row_$j = t_idx(0u, vec4<u32>(0u, m0 + ar_$j, a2, a3));
    }
    var w_$j = array<vec4<f32>, 2>();
#endunroll
    // Activation loaders: vec4 lid % 8 (depths 4 (lid % 8) ..) of columns lid / 8 + 32 j.
    let kq = 4u * (lid % 8u);
#unroll j NX
    let bc_$j = lid / 8u + 32u * $ju;
    let b_ok_$j = n0 + bc_$j < n_len;
    var b_col_$j = 0u;
    if (b_ok_$j) {
        b_col_$j = t_idx(1u, vec4<u32>(0u, n0 + bc_$j, i2, i3)) / 4u;
    }
    var x_$j = vec4<f32>(0.0);
#endunroll

    let wm = 32u * (sid % 4u);
    let wn = WN * (sid / 4u);
#unroll i 2
#unroll j NF
    var acc_$i_$j = coop_mat16x16<f32, C>();
#endunroll
#endunroll

    for (var k0 = 0u; k0 <= k_len; k0 += BK) {
        let stage = (k0 / BK) % 2u;
        if (k0 < k_len) {
            let u = k0 / 32u;
#unroll j 2
            if (a_ok_$j) {
                w_$j = part(a_row_$j, u, p);
            }
#endunroll
#unroll j NX
            if (b_ok_$j) {
                x_$j = src1[b_col_$j + k0 / 4u + lid % 8u];
            }
#endunroll
        }
        if (k0 > 0u) {
            let a0 = (1u - stage) * BM * SK + wm * SK;
            let b0 = (1u - stage) * BN * SK + wn * SK;
#unroll h 2
            {
#unroll i 2
                let ia_$i = a0 + (16u * $iu) * SK + 16u * $hu;
                let fa_$i = coopLoadT<coop_mat16x16<f16, A>>(&a_sh[ia_$i], SK);
#endunroll
#unroll j NF
                let ib_$j = b0 + (16u * $ju) * SK + 16u * $hu;
                let fb_$j = coopLoad<coop_mat16x16<f16, B>>(&b_sh[ib_$j], SK);
#unroll i 2
                acc_$i_$j = coopMultiplyAdd(fa_$i, fb_$j, acc_$i_$j);
#endunroll
#endunroll
            }
#endunroll
        }
        if (k0 < k_len) {
#unroll j 2
            let sa_$j = stage * BM * SK + ar_$j * SK;
            put_a(sa_$j + xp.x, w_$j[0]);
            put_a(sa_$j + xp.y, w_$j[1]);
#endunroll
#unroll j NX
            put_b(stage * BN * SK + bc_$j * SK + kq, x_$j);
#endunroll
        }
        workgroupBarrier();
    }

    let dnb = t_nb(2u, 1u);
    let whole = m0 + BM <= m_len && n0 + BN <= n_len;
    if (whole && dnb % 4u == 0u && t_off(2u) % 4u == 0u) {
#unroll i 2
#unroll j NF
        let o_$i_$j = t_idx(2u, vec4<u32>(m0 + wm + 16u * $iu, n0 + wn + 16u * $ju, i2, i3));
        coopStore(acc_$i_$j, &dst[o_$i_$j], dnb);
#endunroll
#endunroll
    } else {
        let c0 = 256u * sid;
#unroll i 2
#unroll j NF
        coopStore(acc_$i_$j, &c_sh[c0], 16u);
        workgroupBarrier();
        for (var e = lane; e < 256u; e += 32u) {
            let m = m0 + wm + 16u * $iu + e % 16u;
            let n = n0 + wn + 16u * $ju + e / 16u;
            if (m < m_len && n < n_len) {
                store_dst(t_idx(2u, vec4<u32>(m, n, i2, i3)), c_sh[c0 + e]);
            }
        }
        workgroupBarrier();
#endunroll
#endunroll
    }
}
