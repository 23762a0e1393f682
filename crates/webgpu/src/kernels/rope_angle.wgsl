// RoPE angles, shared by `rope.wgsl` and the q/k rotation of `mul_mat_vec.wgsl` (ROPE).

// The angle of pair k at position p as ggml builds it: p times theta_scale once per earlier
// pair, in f32 (not theta_scale^k: the rounding differs).
fn rope_theta(p: f32, k: u32, theta_scale: f32) -> f32 {
    var theta = p;
    for (var i = 0u; i < k; i++) {
        theta *= theta_scale;
    }
    return theta;
}

// (cos, sin) of pair k's rotation by YaRN (ggml_rope_yarn), times its magnitude scale. The
// parameters are op_f(b) .. op_f(b + 4): freq_scale, ext_factor, attn_factor, corr low, high.
fn rope_yarn(theta_extrap: f32, k: u32, b: u32) -> vec2<f32> {
    let freq_scale = op_f(b);
    let ext_factor = op_f(b + 1u);
    let theta_interp = freq_scale * theta_extrap;
    var theta = theta_interp;
    var mscale = op_f(b + 2u);
    if (ext_factor != 0.0) {
        let y = (f32(k) - op_f(b + 3u)) / max(0.001, op_f(b + 4u) - op_f(b + 3u));
        let mix = (1.0 - clamp(y, 0.0, 1.0)) * ext_factor;
        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale *= 1.0 + 0.1 * log(1.0 / freq_scale);
    }
    return vec2<f32>(cos(theta) * mscale, sin(theta) * mscale);
}
