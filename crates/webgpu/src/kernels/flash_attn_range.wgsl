// The keys a block of query rows sees, for `flash_attn_tile.wgsl` and `flash_attn_coop.wgsl`:
// `seen_range` scans the mask rows of the block (`rows` rows from the mask element `m0`, rows
// `mnb1` apart, keys `mnb0` apart) and returns the first and one past the last key that some
// row sees (a mask entry above -inf), the same in every invocation. It has barriers: every
// invocation of the workgroup calls it. The including kernel defines WG and NEG.

var<workgroup> lo_a: atomic<u32>;
var<workgroup> hi_a: atomic<u32>;
var<workgroup> range: vec2<u32>;

fn seen_range(lid: u32, rows: u32, n_kv: u32, m0: u32, mnb0: u32, mnb1: u32) -> vec2<u32> {
    if (lid == 0u) {
        atomicStore(&lo_a, n_kv);
        atomicStore(&hi_a, 0u);
    }
    workgroupBarrier();
    var lo = n_kv;
    var hi = 0u;
    for (var j = lid; j < n_kv; j += WG) {
        var seen = false;
        for (var r = 0u; r < rows; r++) {
            // `|`, not `||`: every load is issued without waiting on the last one's value.
            seen = seen | (load_src3(m0 + r * mnb1 + j * mnb0) >= NEG);
        }
        if (seen) {
            lo = min(lo, j);
            hi = j + 1u;
        }
    }
    atomicMin(&lo_a, lo);
    atomicMax(&hi_a, hi);
    workgroupBarrier();
    if (lid == 0u) {
        range = vec2<u32>(atomicLoad(&lo_a), atomicLoad(&hi_a));
    }
    return workgroupUniformLoad(&range);
}
