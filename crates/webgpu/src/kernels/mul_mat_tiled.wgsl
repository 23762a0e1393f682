// Matrix × matrix (prefill): dst[m, n, i2, i3] = sum_k src0[k, m, a2, a3] * src1[k, n, i2, i3] in
// f32, by 64 × 64 output tiles. Per step of 32 along k, 64 invocations decode one unit (32
// values) of a weight row each into workgroup memory with `unit` (quant_unit.wgsl), and all 256
// load the activation tile; then each invocation accumulates a 4 × 4 block of the tile from
// registers. Weights are thus read once per 64 activation columns instead of once per column.
// src1 is bound as vec4s (offset and column stride whole vec4s; the planner checks).
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2, 4 = r3, 5 = tiles along m. Workgroup z indexes the batch.
// With ID (mul_mat_id; see mul_mat_routes.wgsl) workgroup z is an expert's bucket of routed
// columns, which the tiles along n (op_u(6)) step over.

fn ldw(i: u32) -> u32 {
    return src0[i];
}

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

// a_sh[k * 16 + i]: rows 4i .. 4i + 3 of the weight tile at depth k; b_sh likewise for columns.
var<workgroup> a_sh: array<vec4<f32>, 512>;
var<workgroup> b_sh: array<vec4<f32>, 512>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    let tiles_m = op_u(5u);
    let m0 = (g % tiles_m) * BM;
    let nt = g / tiles_m;
    let k_len = op_u(0u);
    let m_len = op_u(1u);
    let bc = lid / 4u;
    let bq = lid % 4u;
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
        let b_ok = n0 + bc < n_len;
        var b_col = 0u;
        if (b_ok) {
            b_col = route_src1(route_col(bk, n0 + bc));
        }
#else
    let n_len = op_u(2u);
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);
    let n0 = nt * BN;
    {
        let b_ok = n0 + bc < n_len;
        var b_col = 0u;
        if (b_ok) {
            b_col = t_idx(1u, vec4<u32>(0u, n0 + bc, i2, i3)) / 4u;
        }
#endif

        // Loader roles: invocation lid < 64 decodes weight row m0 + lid; every invocation
        // loads 8 depths (a quarter of BK) of activation column n0 + lid / 4 (at b_col).
        let ar = m0 + lid;
        let a_ok = lid < BM && ar < m_len;
        var a_row = 0u;
        if (a_ok) {
            a_row = t_idx(0u, vec4<u32>(0u, ar, a2, a3));
        }

        let tm = lid % 16u;
        let tn = lid / 16u;
        var acc: array<vec4<f32>, 4>;
        for (var i = 0u; i < 4u; i++) {
            acc[i] = vec4<f32>(0.0);
        }
        for (var k0 = 0u; k0 < k_len; k0 += BK) {
            if (lid < BM) {
                var w: array<vec4<f32>, 8>;
                if (a_ok) {
                    w = unit(a_row, k0 / 32u);
                }
                for (var j = 0u; j < 8u; j++) {
                    let v = w[j];
                    a_sh[(4u * j) * 16u + lid / 4u][lid % 4u] = v.x;
                    a_sh[(4u * j + 1u) * 16u + lid / 4u][lid % 4u] = v.y;
                    a_sh[(4u * j + 2u) * 16u + lid / 4u][lid % 4u] = v.z;
                    a_sh[(4u * j + 3u) * 16u + lid / 4u][lid % 4u] = v.w;
                }
            }
            var x0 = vec4<f32>(0.0);
            var x1 = vec4<f32>(0.0);
            if (b_ok) {
                let xb = b_col + (k0 + 8u * bq) / 4u;
                x0 = src1[xb];
                x1 = src1[xb + 1u];
            }
            let kb = 8u * bq;
            b_sh[kb * 16u + bc / 4u][bc % 4u] = x0.x;
            b_sh[(kb + 1u) * 16u + bc / 4u][bc % 4u] = x0.y;
            b_sh[(kb + 2u) * 16u + bc / 4u][bc % 4u] = x0.z;
            b_sh[(kb + 3u) * 16u + bc / 4u][bc % 4u] = x0.w;
            b_sh[(kb + 4u) * 16u + bc / 4u][bc % 4u] = x1.x;
            b_sh[(kb + 5u) * 16u + bc / 4u][bc % 4u] = x1.y;
            b_sh[(kb + 6u) * 16u + bc / 4u][bc % 4u] = x1.z;
            b_sh[(kb + 7u) * 16u + bc / 4u][bc % 4u] = x1.w;
            workgroupBarrier();
            for (var k = 0u; k < BK; k++) {
                let a = a_sh[k * 16u + tm];
                let b = b_sh[k * 16u + tn];
                acc[0] += a.x * b;
                acc[1] += a.y * b;
                acc[2] += a.z * b;
                acc[3] += a.w * b;
            }
            workgroupBarrier();
        }
        for (var c = 0u; c < 4u; c++) {
            let n = n0 + 4u * tn + c;
            if (n < n_len) {
#if ID
                let sc = route_col(bk, n);
#endif
                for (var i = 0u; i < 4u; i++) {
                    let m = m0 + 4u * tm + i;
                    if (m < m_len) {
#if ID
                        store_dst(route_dst(m, sc), acc[i][c]);
#else
                        store_dst(t_idx(2u, vec4<u32>(m, n, i2, i3)), acc[i][c]);
#endif
                    }
                }
            }
        }
    }
}
