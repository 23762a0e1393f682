// Dense same-dtype cpy/cont as a copy of 16-byte words: both bindings are vec4<u32>, both
// windows start 16-byte aligned and hold n_items() words. The operands are described as i32
// words, so a descriptor offset / 4 is a vec4 index. Each invocation moves {{PER}} words, a
// workgroup width apart (neighbouring lanes touch neighbouring words), loading all of them
// before storing any.

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n = n_items();
    let first = group_id(wid, nwg) * ({{WG}}u * {{PER}}u) + lid;
    let s = t_off(0u) >> 2u;
    let d = t_off(1u) >> 2u;
    if (first + ({{PER}}u - 1u) * {{WG}}u < n) {
        var w: array<vec4<u32>, {{PER}}>;
        for (var j = 0u; j < {{PER}}u; j++) {
            w[j] = src0[s + first + j * {{WG}}u];
        }
        for (var j = 0u; j < {{PER}}u; j++) {
            dst[d + first + j * {{WG}}u] = w[j];
        }
        return;
    }
    for (var j = 0u; j < {{PER}}u; j++) {
        let i = first + j * {{WG}}u;
        if (i < n) {
            dst[d + i] = src0[s + i];
        }
    }
}
