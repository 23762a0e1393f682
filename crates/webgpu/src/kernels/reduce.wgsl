// Reductions and sorting along dim 0, one workgroup per row of src0 (rows folded into a 2-d
// grid), f32 accumulation: SUM (every element, one workgroup), SUM_ROWS, CUMSUM (each
// invocation scans a contiguous chunk, then the chunk totals are scanned in workgroup memory),
// ARGSORT (bitonic sort of the row's indices in {{SORT_N}} workgroup slots, comparing values
// read from src0; ties and NaNs resolved as the stable CPU sort: NaN after every number in
// ascending order, before in descending; equal values keep index order). ARGSORT: op_u 0 = 1
// for descending.

#if ARGSORT
var<workgroup> order: array<u32, {{SORT_N}}>;
#endif

// The 4-d index of row `row` of binding k.
fn row_index(k: u32, row: u32) -> vec4<u32> {
    let n1 = t_ne(k, 1u);
    let n2 = t_ne(k, 2u);
    return vec4<u32>(0u, row % n1, (row / n1) % n2, row / (n1 * n2));
}

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// -1, 0 or 1 as x sorts before, with or after y ascending (NaN after every number).
fn cmp_asc(x: f32, y: f32) -> i32 {
    let nx = is_nan(x);
    let ny = is_nan(y);
    if (nx || ny) {
        return select(select(-1, 1, nx), 0, nx && ny);
    }
    return select(select(0, 1, x > y), -1, x < y);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    let valid = row < n_items();
#if SUM
    let total_n = select(0u, t_ne(0u, 0u) * t_ne(0u, 1u) * t_ne(0u, 2u) * t_ne(0u, 3u), valid);
    var acc = 0.0;
    for (var i = lid; i < total_n; i += WG) {
        acc += load_src0(t_idx(0u, t_unflat(0u, i)));
    }
    let total = wg_sum(lid, acc);
    if (valid && lid == 0u) {
        store_dst(t_idx(1u, vec4<u32>(0u)), total);
    }
#else
    let n = select(0u, t_ne(0u, 0u), valid);
    let src = t_idx(0u, row_index(0u, row));
    let od = t_idx(1u, row_index(1u, row));
    let s0 = t_nb(0u, 0u);
    let d0 = t_nb(1u, 0u);
#if SUM_ROWS
    var acc = 0.0;
    for (var i = lid; i < n; i += WG) {
        acc += load_src0(src + i * s0);
    }
    let total = wg_sum(lid, acc);
    if (valid && lid == 0u) {
        store_dst(od, total);
    }
#endif
#if CUMSUM
    let chunk = (n + WG - 1u) / WG;
    let lo = min(lid * chunk, n);
    let hi = min(lo + chunk, n);
    var acc = 0.0;
    for (var i = lo; i < hi; i++) {
        acc += load_src0(src + i * s0);
    }
    // Inclusive scan of the chunk totals (Hillis-Steele), then each chunk's own prefix.
    red[lid] = acc;
    workgroupBarrier();
    for (var s = 1u; s < WG; s = s * 2u) {
        let v = select(0.0, red[lid - s], lid >= s);
        workgroupBarrier();
        red[lid] += v;
        workgroupBarrier();
    }
    var run = red[lid] - acc;
    for (var i = lo; i < hi; i++) {
        run += load_src0(src + i * s0);
        store_dst(od + i * d0, run);
    }
#endif
#if ARGSORT
    let desc = op_u(0u) == 1u;
    for (var i = lid; i < {{SORT_N}}u; i += {{WG}}u) {
        order[i] = i;
    }
    workgroupBarrier();
    for (var k = 2u; k <= {{SORT_N}}u; k = k * 2u) {
        for (var j = k / 2u; j > 0u; j = j / 2u) {
            for (var t = lid; t < {{SORT_N}}u; t += {{WG}}u) {
                let l = t ^ j;
                if (l > t) {
                    let a = order[t];
                    let b = order[l];
                    // Whether index b must come before index a (padding slots sort last).
                    var b_first = false;
                    if (a >= n) {
                        b_first = b < n || b < a;
                    } else if (b < n) {
                        let va = load_src0(src + a * s0);
                        let vb = load_src0(src + b * s0);
                        var c = cmp_asc(vb, va);
                        if (desc) {
                            c = -c;
                        }
                        b_first = c < 0 || (c == 0 && b < a);
                    }
                    let up = (t & k) == 0u;
                    if (b_first == up) {
                        order[t] = b;
                        order[l] = a;
                    }
                }
            }
            workgroupBarrier();
        }
    }
    for (var i = lid; i < n; i += {{WG}}u) {
        dst[od + i * d0] = i32(order[i]);
    }
#endif
#endif
}
