// Workgroup-wide reductions shared by the one-workgroup-per-row kernels (norms, soft_max,
// reductions): every invocation contributes one value and gets the result.

const WG: u32 = {{WG}}u;

var<workgroup> red: array<f32, {{WG}}>;

// Sum of `v` over the workgroup.
fn wg_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

// Maximum of `v` over the workgroup.
fn wg_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}
