// Gated linear units: dst = {{EXPR}}, an expression of the gated value `x` (from src0) and the
// linear value `g` (from src1). For ggml_glu both are views of the two halves of one tensor.

fn swiglu_oai(x: f32, g: f32, alpha: f32, limit: f32) -> f32 {
    let xc = min(x, limit);
    let gc = min(max(g, -limit), limit);
    return xc / (1.0 + exp(-alpha * xc)) * (gc + 1.0);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let f = linear_id(wid, nwg, lid);
    if (f >= n_items()) {
        return;
    }
    let i = t_unflat(2u, f);
    let x = load_src0(t_idx(0u, i));
    let g = load_src1(t_idx(1u, i));
    store_dst(t_idx(2u, i), {{EXPR}});
}
