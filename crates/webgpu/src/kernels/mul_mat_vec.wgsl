// Matrix × a few vectors (decode): dst[m, n, i2, i3] = sum_k src0[k, m, a2, a3] * src1[k, n, i2, i3]
// for N <= NC activation columns, accumulated in f32. Each weight row is read once for all
// columns, unit (32 values) by unit, decoded in registers by `unit` (quant_unit.wgsl).
// A workgroup computes RPW consecutive rows: lane t takes units t, t + WG, ... of every one of
// them, so each activation load serves RPW rows and RPW units are in flight per lane; then the
// lanes reduce the RPW·NC (·2 for GLU) sums in workgroup memory.
// src1 is bound as vec4s: its offset and column stride are whole vec4s (the planner checks).
// op_u: 0 = K, 1 = M, 2 = N, 3 = r2 (src1.ne2 / src0.ne2), 4 = r3. Workgroup z indexes the batch.
// Fused epilogues:
// ADD: dst (binding 3) = product + src2, a residual of the product's shape.
// GLU: a second weight src2 of src0's shape and dtype; dst (binding 3) = EXPR(x, g) with x the
//   product with src0 (the gate) and g the one with src2 (the up projection), as `glu.wgsl`.

const NC: u32 = {{NC}}u;
const RPW: u32 = {{RPW}}u;
const WG: u32 = {{WG}}u;

#if GLU
const NW: u32 = 2u;
#else
const NW: u32 = 1u;
#endif
// Sums per lane: (weight, row, column).
const NS: u32 = NW * RPW * NC;

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

// acc[base + c] += w · column c of src1 at vec4 `xb` (columns `xcol` vec4s apart).
fn dot_unit(acc: ptr<function, array<f32, NS>>, base: u32, w: array<vec4<f32>, 8>, xb: u32,
            xcol: u32, n_cols: u32) {
    for (var c = 0u; c < NC; c++) {
        if (c < n_cols) {
            let x = xb + c * xcol;
            var s = dot(w[0], src1[x]);
            for (var j = 1u; j < 8u; j++) {
                s += dot(w[j], src1[x + j]);
            }
            (*acc)[base + c] += s;
        }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m0 = group_id(wid, nwg) * RPW;
    let m_len = op_u(1u);
    let n_cols = op_u(2u);
    let i2 = wid.z % t_ne(1u, 2u);
    let i3 = wid.z / t_ne(1u, 2u);
    let a2 = i2 / op_u(3u);
    let a3 = i3 / op_u(4u);
    let rows = min(RPW, m_len - min(m0, m_len));
    var acc: array<f32, NS>;
    for (var k = 0u; k < NS; k++) {
        acc[k] = 0.0;
    }
    let x0 = t_idx(1u, vec4<u32>(0u, 0u, i2, i3)) / 4u;
    let xcol = t_nb(1u, 1u) / 4u;
    let units = op_u(0u) / 32u;
    for (var u = lid; u < units; u += WG) {
        let xb = x0 + 8u * u;
        for (var r = 0u; r < RPW; r++) {
            if (r < rows) {
                let wi = vec4<u32>(0u, m0 + r, a2, a3);
#if GLU
                wsel = 0u;
                let w0 = unit(t_idx(0u, wi), u);
                wsel = 1u;
                let w1 = unit(t_idx(2u, wi), u);
                dot_unit(&acc, r * NC, w0, xb, xcol, n_cols);
                dot_unit(&acc, (RPW + r) * NC, w1, xb, xcol, n_cols);
#else
                dot_unit(&acc, r * NC, unit(t_idx(0u, wi), u), xb, xcol, n_cols);
#endif
            }
        }
    }
    for (var k = 0u; k < NS; k++) {
        red[k * WG + lid] = acc[k];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            for (var k = 0u; k < NS; k++) {
                red[k * WG + lid] += red[k * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    // Invocation (r, c) stores column c of row m0 + r.
    let r = lid / NC;
    let c = lid % NC;
    if (r < rows && c < n_cols) {
        let o = vec4<u32>(m0 + r, c, i2, i3);
        let y = red[(r * NC + c) * WG];
#if ADD
        store_dst(t_idx(3u, o), y + load_src2(t_idx(2u, o)));
#else
#if GLU
        let x = y;
        let g = red[((RPW + r) * NC + c) * WG];
        store_dst(t_idx(3u, o), {{EXPR}});
#else
        store_dst(t_idx(2u, o), y);
#endif
#endif
    }
}
