//! Element-wise ops: binary with broadcast, every unary op, clamp, scale, fill.

use wgllm_core::op::{BinaryOp, UnaryOp};
use wgllm_core::Result;

use crate::Ctx;

/// `a op b`, `b` tiled over `a` (ggml_can_repeat broadcast).
pub(crate) fn binary(ctx: &mut Ctx, op: BinaryOp) -> Result<()> {
    let a = ctx.dense(0)?;
    let b = ctx.dense(1)?;
    let f: fn(f32, f32) -> f32 = match op {
        BinaryOp::Add => |x, y| x + y,
        BinaryOp::Sub => |x, y| x - y,
        BinaryOp::Mul => |x, y| x * y,
        BinaryOp::Div => |x, y| x / y,
    };
    let mut out = a.data.clone();
    let [n0, n1, n2, n3] = a.ne;
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                let o = a.idx(0, i1, i2, i3);
                for i0 in 0..n0 {
                    let bv = b.at(i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
                    out[o + i0] = f(a.data[o + i0], bv);
                }
            }
        }
    }
    ctx.write(&out)
}

/// ggml's `gelu` (tanh approximation).
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
}

/// ggml's `gelu_quick`: `x·σ(1.702x)`.
pub fn gelu_quick(x: f32) -> f32 {
    x * sigmoid(1.702 * x)
}

/// Exact GELU with the error function.
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Logistic sigmoid.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU: `x·σ(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Applies one unary op to one value, with ggml's formulas.
pub fn apply_unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sgn => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Neg => -x,
        UnaryOp::Step => f32::from(x > 0.0),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Elu => {
            if x > 0.0 {
                x
            } else {
                x.exp_m1()
            }
        }
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluQuick => gelu_quick(x),
        UnaryOp::GeluErf => gelu_erf(x),
        UnaryOp::Silu => silu(x),
        UnaryOp::Hardswish => x * ((x + 3.0) / 6.0).clamp(0.0, 1.0),
        UnaryOp::Hardsigmoid => ((x + 3.0) / 6.0).clamp(0.0, 1.0),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Expm1 => x.exp_m1(),
        UnaryOp::Softplus => {
            if x > 20.0 {
                x
            } else {
                x.exp().ln_1p()
            }
        }
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round(),
        UnaryOp::Trunc => x.trunc(),
        UnaryOp::Xielu {
            alpha_n,
            alpha_p,
            beta,
            eps,
        } => {
            if x > 0.0 {
                alpha_p * x * x + beta * x
            } else {
                (x.min(eps).exp_m1() - x) * alpha_n + beta * x
            }
        }
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqr => x * x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
    }
}

fn map(ctx: &mut Ctx, f: impl Fn(f32) -> f32) -> Result<()> {
    let mut a = ctx.dense(0)?;
    a.data.iter_mut().for_each(|v| *v = f(*v));
    ctx.write(&a.data)
}

/// Every unary op.
pub(crate) fn unary(ctx: &mut Ctx, op: UnaryOp) -> Result<()> {
    map(ctx, |x| apply_unary(op, x))
}

/// ggml_clamp.
pub(crate) fn clamp(ctx: &mut Ctx, min: f32, max: f32) -> Result<()> {
    map(ctx, |x| x.max(min).min(max))
}

/// ggml_scale_bias: `x·scale + bias`.
pub(crate) fn scale(ctx: &mut Ctx, s: f32, b: f32) -> Result<()> {
    map(ctx, |x| x * s + b)
}

/// ggml_fill.
pub(crate) fn fill(ctx: &mut Ctx, value: f32) -> Result<()> {
    map(ctx, |_| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unary_formulas_match_hand_values() {
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(close(gelu(1.0), 0.841_192));
        assert!(close(gelu_erf(1.0), 0.841_344_7));
        assert!(close(gelu_quick(1.0), 0.845_796));
        assert!(close(silu(2.0), 1.761_594_2));
        assert_eq!(apply_unary(UnaryOp::Sgn, -0.5), -1.0);
        assert_eq!(apply_unary(UnaryOp::Step, 0.0), 0.0);
        assert_eq!(
            apply_unary(UnaryOp::Round, 2.5),
            3.0,
            "roundf rounds half away from zero"
        );
        assert_eq!(apply_unary(UnaryOp::Hardswish, 1.0), 1.0 * 4.0 / 6.0);
        assert_eq!(apply_unary(UnaryOp::Softplus, 30.0), 30.0);
        assert!(close(
            apply_unary(UnaryOp::Softplus, 0.0),
            std::f32::consts::LN_2
        ));
        let x = UnaryOp::Xielu {
            alpha_n: 0.8,
            alpha_p: 0.8,
            beta: 0.5,
            eps: -1e-6,
        };
        assert!(close(apply_unary(x, 2.0), 0.8 * 4.0 + 1.0));
        assert!(close(
            apply_unary(x, -1.0),
            ((-1.0f32).exp_m1() + 1.0) * 0.8 - 0.5
        ));
    }
}
