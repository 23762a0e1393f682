// Matrix × matrix (prefill) without cooperative matrices: dst[m, n, i2, i3] = sum_k src0[k, m,
// a2, a3] * src1[k, n, i2, i3] in f32, by output tiles of BM = 64 or 128 weight rows × BN = 64
// activation columns, 256 invocations a workgroup. Invocation (tm, tn) = (lid % 16, lid / 16)
// keeps rows m0 + tm + 16 i (i < TM = BM / 16) × columns n0 + tn + 16 j (j < 4) of the tile in
// registers: per four depths it reads TM + 4 vec4s of workgroup memory for 16 TM multiply-adds.
//
// Steps of BK = 32 along k (one unit of 32 weights a row). Workgroup memory holds one step, row
// by row with k fastest: a_sh[sw(r, v)] is vec4 v (depths 4 v .. 4 v + 3) of tile row r, b_sh
// likewise for columns. `sw` XORs v with r % 8, so the same vec4 of 8 neighbouring rows lies in
// distinct banks without padding (a 64 × 64 tile's 16 KiB fit WebGPU's default workgroup
// storage). As in mul_mat_coop.wgsl, each invocation fetches the next step into registers while
// the current one's products run: its two activation vec4s (columns lid / 8 + 32 j, vec4 lid % 8)
// before them, its WJ = BM / 64 weight parts (quant_part.wgsl's `part`: part lid % 4 of rows
// lid / 4 + 64 j, so four neighbouring invocations read one unit) after the first half. Rows and
// columns past the result are loaded clamped to the last one (their sums are never stored), and
// the last step loads itself again: the loop is straight-line code.
// src1 is bound as vec4s (offset and column stride whole vec4s; the planner checks).
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2, 4 = r3, 5 = tiles along m. Workgroup z indexes the batch.
// With ID (mul_mat_id; see mul_mat_routes.wgsl) workgroup z is an expert's bucket of routed
// columns, which the tiles along n (op_u(6)) step over.

fn ldw(i: u32) -> u32 {
    return src0[i];
}

const BM: u32 = {{BM}}u;
const BN: u32 = 64u;
const BK: u32 = 32u;

var<workgroup> a_sh: array<vec4<f32>, BM * 8u>;
var<workgroup> b_sh: array<vec4<f32>, BN * 8u>;

// The index of vec4 v of tile row (or column) r in a_sh (b_sh).
fn sw(r: u32, v: u32) -> u32 {
    return r * 8u + (v ^ (r & 7u));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    let tiles_m = op_u(5u);
    let m0 = (g % tiles_m) * BM;
    let nt = g / tiles_m;
    let k_len = op_u(0u);
    let m_len = op_u(1u);
    let steps = k_len / BK;
#if ID
    let bk = wid.z;
    let n_len = route_len(bk, lid);
    let a2 = min(bk, t_ne(0u, 2u) - 1u);
    let a3 = 0u;
    let i2 = 0u;
    let i3 = 0u;
    for (var n0 = nt * BN; n0 < n_len; n0 += op_u(6u) * BN) {
        if (bk == op_u(3u)) {
            route_nan(lid, 256u, m0, BM, n0, BN, n_len);
            continue;
        }
#else
    let n_len = op_u(2u);
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);
    let n0 = nt * BN;
    {
#endif
        // Loaders: weight parts and activation vec4s of step 0.
        let p = lid % 4u;
        let xp = xpair(p);
#unroll j WJ
        let a_r_$j = lid / 4u + 64u * $ju;
        let a_row_$j = t_idx(0u, vec4<u32>(0u, min(m0 + a_r_$j, m_len - 1u), a2, a3));
        var w_$j = part(a_row_$j, 0u, p);
#endunroll
        let v = lid % 8u;
#unroll j 2
        let b_c_$j = lid / 8u + 32u * $ju;
        let b_n_$j = min(n0 + b_c_$j, n_len - 1u);
#if ID
        let b_col_$j = route_src1(route_col(bk, b_n_$j)) + v;
#else
        let b_col_$j = t_idx(1u, vec4<u32>(0u, b_n_$j, i2, i3)) / 4u + v;
#endif
        var x_$j = src1[b_col_$j];
#endunroll

        let tm = lid % 16u;
        let tn = lid / 16u;
        let sa = tm & 7u;
        let sb = tn & 7u;
#unroll i TM
#unroll j 4
        var acc_$i_$j = 0.0;
#endunroll
#endunroll

        for (var t = 0u; t < steps; t++) {
            // The step's registers to workgroup memory once the last step's products are done.
            workgroupBarrier();
#unroll j WJ
            a_sh[sw(a_r_$j, xp.x)] = w_$j[0];
            a_sh[sw(a_r_$j, xp.y)] = w_$j[1];
#endunroll
#unroll j 2
            b_sh[sw(b_c_$j, v)] = x_$j;
#endunroll
            workgroupBarrier();
            let un = min(t + 1u, steps - 1u);
#unroll j 2
            x_$j = src1[b_col_$j + 8u * un];
#endunroll
#unroll h 2
            if ($hu == 1u) {
#unroll j WJ
                w_$j = part(a_row_$j, un, p);
#endunroll
            }
#unroll q 4
            {
                let vq = 4u * $hu + $qu;
#unroll j 4
                let b_$j = b_sh[(tn + 16u * $ju) * 8u + (vq ^ sb)];
#endunroll
#unroll i TM
                let a_$i = a_sh[(tm + 16u * $iu) * 8u + (vq ^ sa)];
#unroll j 4
                acc_$i_$j = fma(a_$i.w, b_$j.w, fma(a_$i.z, b_$j.z,
                    fma(a_$i.y, b_$j.y, fma(a_$i.x, b_$j.x, acc_$i_$j))));
#endunroll
#endunroll
            }
#endunroll
#endunroll
        }

#unroll j 4
        let n_$j = n0 + tn + 16u * $ju;
        if (n_$j < n_len) {
#if ID
            let sc_$j = route_col(bk, n_$j);
#endif
#unroll i TM
            let m_$i_$j = m0 + tm + 16u * $iu;
            if (m_$i_$j < m_len) {
#if ID
                store_dst(route_dst(m_$i_$j, sc_$j), acc_$i_$j);
#else
                store_dst(t_idx(2u, vec4<u32>(m_$i_$j, n_$j, i2, i3)), acc_$i_$j);
#endif
            }
#endunroll
        }
#endunroll
    }
}
