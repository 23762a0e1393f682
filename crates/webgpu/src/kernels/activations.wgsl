// Activation helpers shared by the element maps and the gated linear units, in f32.

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// tanh that stays finite for large |x| (tanh(15) is 1 in f32).
fn tanh_safe(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}

fn expm1(x: f32) -> f32 {
    if (abs(x) < 1e-4) {
        return x + 0.5 * x * x + x * x * x / 6.0;
    }
    return exp(x) - 1.0;
}

// Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7).
fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
        + 0.254829592) * t * exp(-x * x);
    return sign(x) * y;
}

fn gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_safe(0.7978845608 * x * (1.0 + 0.044715 * x * x)));
}

// Rounds half away from zero, as C's roundf.
fn round_away(x: f32) -> f32 {
    return sign(x) * floor(abs(x) + 0.5);
}

