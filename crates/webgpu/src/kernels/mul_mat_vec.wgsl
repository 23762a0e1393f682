// Matrix × a few vectors (decode): dst[m, n, i2, i3] = sum_k src0[k, m, a2, a3] * src1[k, n, i2, i3]
// for N <= NC activation columns, accumulated in f32. Each weight row is read once for all
// columns, unit (32 values) by unit, decoded in registers by `unit` (quant_unit.wgsl).
// A workgroup has RPW rows of TPR lanes; lane t of a row takes units t, t + TPR, ..., then the
// lanes of the row reduce in workgroup memory.
// src1 is bound as vec4s: its offset and column stride are whole vec4s (the planner checks).
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2 (src1.ne2 / src0.ne2), 4 = r3. Workgroup z indexes the batch.
// Fused epilogues:
// ADD: dst (binding 3) = product + src2, a residual of the product's shape.
// GLU: a second weight src2 of src0's shape and dtype; dst (binding 3) = EXPR(x, g) with x the
//   product with src0 (the gate) and g the one with src2 (the up projection), as `glu.wgsl`.

const NC: u32 = {{NC}}u;
const TPR: u32 = {{TPR}}u;
const RPW: u32 = {{WG}}u / TPR;

#if GLU
const NW: u32 = 2u;
#else
const NW: u32 = 1u;
#endif

var<workgroup> red: array<f32, {{RED}}>;
// Which weight `unit` decodes: 0 = src0, 1 = src2.
var<private> wsel: u32;

fn ldw(i: u32) -> u32 {
#if GLU
    if (wsel == 1u) {
        return src2[i];
    }
#endif
    return src0[i];
}

// acc[c] += w · column c of src1 at vec4 `xb` (columns `xcol` vec4s apart).
fn dot_unit(acc: ptr<function, array<f32, NC>>, w: array<vec4<f32>, 8>, xb: u32, xcol: u32,
            n_cols: u32) {
    for (var c = 0u; c < NC; c++) {
        if (c < n_cols) {
            let x = xb + c * xcol;
            var s = dot(w[0], src1[x]);
            for (var j = 1u; j < 8u; j++) {
                s += dot(w[j], src1[x + j]);
            }
            (*acc)[c] += s;
        }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let r = lid / TPR;
    let lane = lid % TPR;
    let m = group_id(wid, nwg) * RPW + r;
    let valid = m < op_u(1u);
    let n_cols = op_u(2u);
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    var acc: array<f32, NC>;
    var acc2: array<f32, NC>;
    for (var c = 0u; c < NC; c++) {
        acc[c] = 0.0;
        acc2[c] = 0.0;
    }
    if (valid) {
        let wi = vec4<u32>(0u, m, i2 / op_u(3u), i3 / op_u(4u));
        let row = t_idx(0u, wi);
        let x0 = t_idx(1u, vec4<u32>(0u, 0u, i2, i3)) / 4u;
        let xcol = t_nb(1u, 1u) / 4u;
        let units = op_u(0u) / 32u;
#if GLU
        let row2 = t_idx(2u, wi);
        for (var u = lane; u < units; u += TPR) {
            wsel = 0u;
            let w0 = unit(row, u);
            wsel = 1u;
            let w1 = unit(row2, u);
            dot_unit(&acc, w0, x0 + 8u * u, xcol, n_cols);
            dot_unit(&acc2, w1, x0 + 8u * u, xcol, n_cols);
        }
#else
        // Two units per trip, so each lane has both units' loads in flight at once.
        var u = lane;
        for (; u + TPR < units; u += 2u * TPR) {
            let w0 = unit(row, u);
            let w1 = unit(row, u + TPR);
            dot_unit(&acc, w0, x0 + 8u * u, xcol, n_cols);
            dot_unit(&acc, w1, x0 + 8u * (u + TPR), xcol, n_cols);
        }
        if (u < units) {
            dot_unit(&acc, unit(row, u), x0 + 8u * u, xcol, n_cols);
        }
#endif
    }
    for (var c = 0u; c < NC; c++) {
        red[c * {{WG}}u + lid] = acc[c];
#if GLU
        red[(NC + c) * {{WG}}u + lid] = acc2[c];
#endif
    }
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            for (var c = 0u; c < NW * NC; c++) {
                red[c * {{WG}}u + lid] += red[c * {{WG}}u + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (valid && lane < n_cols) {
        let o = vec4<u32>(m, lane, i2, i3);
        let y = red[lane * {{WG}}u + r * TPR];
#if ADD
        store_dst(t_idx(3u, o), y + load_src2(t_idx(2u, o)));
#else
#if GLU
        let x = y;
        let g = red[(NC + lane) * {{WG}}u + r * TPR];
        store_dst(t_idx(3u, o), {{EXPR}});
#else
        store_dst(t_idx(2u, o), y);
#endif
#endif
    }
}
