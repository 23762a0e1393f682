// dst[m, n, i2, i3] = sum_k src0[k, m, i2 / r2, i3 / r3] * src1[k, n, i2, i3] (ggml_mul_mat),
// accumulated in f32. One workgroup computes weight row m against TN consecutive columns n: its
// {{WG}} invocations split K, then reduce their partial sums in workgroup memory.
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2 (src1.ne2 / src0.ne2), 4 = r3, 5 = column tiles per row.
// Workgroup z indexes the batch (i2 + ne12 * i3).

const TN: u32 = {{TN}}u;
const WG: u32 = {{WG}}u;

var<workgroup> partial: array<f32, {{PARTIAL}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    let tiles = op_u(5u);
    let m = g / tiles;
    let n0 = (g % tiles) * TN;
    let valid = m < op_u(1u);
    let ncols = select(0u, min(TN, op_u(2u) - n0), valid);
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);
    let k_len = op_u(0u);

    var acc: array<f32, {{TN}}>;
    for (var c = 0u; c < TN; c++) {
        acc[c] = 0.0;
    }
    if (ncols > 0u) {
#if QUANT
        // Units of 32 values: block u / SUBS, values 32 * (u % SUBS) ..
        let row = t_idx(0u, vec4<u32>(0u, m, a2, a3));
        let units = k_len / 32u;
        for (var u = lid; u < units; u += WG) {
            let blk = row + (u / {{SUBS}}u) * {{TYPE_SIZE}}u;
            let j0 = (u % {{SUBS}}u) * 32u;
            let k0 = u * 32u;
            for (var jj = 0u; jj < 32u; jj++) {
                let av = dq(blk, j0 + jj);
                for (var c = 0u; c < ncols; c++) {
                    acc[c] += av * load_src1(t_idx(1u, vec4<u32>(k0 + jj, n0 + c, i2, i3)));
                }
            }
        }
#else
        for (var k = lid; k < k_len; k += WG) {
            let av = load_src0(t_idx(0u, vec4<u32>(k, m, a2, a3)));
            for (var c = 0u; c < ncols; c++) {
                acc[c] += av * load_src1(t_idx(1u, vec4<u32>(k, n0 + c, i2, i3)));
            }
        }
#endif
    }
    for (var c = 0u; c < TN; c++) {
        partial[c * WG + lid] = acc[c];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            for (var c = 0u; c < TN; c++) {
                partial[c * WG + lid] += partial[c * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < ncols) {
        store_dst(t_idx(2u, vec4<u32>(m, n0 + lid, i2, i3)), partial[lid * WG]);
    }
}
