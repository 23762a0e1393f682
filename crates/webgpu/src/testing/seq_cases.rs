//! Op-table cases of the sequence and convolution ops: ssm_conv, conv_2d and im2col (f32 and
//! f16, strides, padding, dilation, batches, a transposed input), solve_tri (all eight forms on
//! diagonally dominant matrices, so substitution stays well conditioned).
//!
//! Tolerances: im2col copies (exact for f32, one f16 ulp for f16 results); ssm_conv and conv_2d
//! accumulate products in the reference's order, but a GPU may fuse multiply-adds, so they get
//! mul_mat's 1e-9 (f16 results one ulp). solve_tri divides (not correctly rounded on GPUs) and
//! propagates through n substitution steps: 1e-9.

use wgllm_core::{DType, Graph, Result, TensorId};

use super::cases::{case, f16_tol, input, EXACT, MATMUL};
use super::{Built, Case, Rng};

fn ssm_conv_cases(out: &mut Vec<Case>) {
    for (d_conv, d_inner, n_t, n_s) in [(4u64, 7u64, 5u64, 2u64), (3, 33, 1, 1)] {
        out.push(case(
            "SSM_CONV",
            format!("SSM_CONV f32 d_conv={d_conv} d_inner={d_inner} n_t={n_t} n_s={n_s}"),
            MATMUL,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(
                    g,
                    rng,
                    &mut b,
                    DType::F32,
                    [d_conv - 1 + n_t, d_inner, n_s, 1],
                    -1.0,
                    1.0,
                )?;
                let w = input(
                    g,
                    rng,
                    &mut b,
                    DType::F32,
                    [d_conv, d_inner, 1, 1],
                    -1.0,
                    1.0,
                )?;
                let r = g.ssm_conv(x, w)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

/// (kernel extents, input extents, stride, pad, dilation)
type ConvShape = ([u64; 4], [u64; 4], [u32; 2], [u32; 2], [u32; 2]);

const CONVS: [ConvShape; 3] = [
    ([3, 3, 2, 4], [7, 6, 2, 2], [1, 1], [1, 1], [1, 1]),
    ([2, 3, 3, 2], [9, 8, 3, 1], [2, 1], [0, 2], [2, 1]),
    ([1, 1, 5, 3], [4, 3, 5, 2], [1, 1], [0, 0], [1, 1]),
];

fn conv_cases(out: &mut Vec<Case>) {
    for (ke, xe, s, p, d) in CONVS {
        for (kt, xt) in [
            (DType::F32, DType::F32),
            (DType::F16, DType::F32),
            (DType::F16, DType::F16),
        ] {
            let desc =
                format!("CONV_2D {kt} x {xt} kernel {ke:?} input {xe:?} s {s:?} p {p:?} d {d:?}");
            out.push(case("CONV_2D", desc, f16_tol(xt, MATMUL), move |g, rng| {
                let mut b = Built::default();
                let k = input(g, rng, &mut b, kt, ke, -1.0, 1.0)?;
                let x = input(g, rng, &mut b, xt, xe, -1.0, 1.0)?;
                let r = g.conv_2d(k, x, s, p, d)?;
                g.mark_output(r)?;
                Ok(b)
            }));
            let desc = format!(
                "IM2COL 2-D {xt} -> {kt} kernel {ke:?} input {xe:?} s {s:?} p {p:?} d {d:?}"
            );
            out.push(case("IM2COL", desc, f16_tol(kt, EXACT), move |g, rng| {
                let mut b = Built::default();
                let k = input(g, rng, &mut b, DType::F32, ke, -1.0, 1.0)?;
                let x = input(g, rng, &mut b, xt, xe, -1.0, 1.0)?;
                let r = g.im2col(k, x, s, p, d, true, kt)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
    out.push(case(
        "CONV_2D",
        "CONV_2D f32 transposed input [6,7,2,1]".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let k = input(g, rng, &mut b, DType::F32, [3, 2, 2, 3], -1.0, 1.0)?;
            let x = input(g, rng, &mut b, DType::F32, [7, 6, 2, 1], -1.0, 1.0)?;
            let xt = g.transpose(x)?;
            let r = g.conv_2d(k, xt, [1, 2], [1, 0], [1, 1])?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    for dt in [DType::F32, DType::F16] {
        out.push(case(
            "IM2COL",
            format!("IM2COL 1-D f32 -> {dt} kernel [3,4] input [11,4,2] s 2 p 1 d 2"),
            f16_tol(dt, EXACT),
            move |g, rng| {
                let mut b = Built::default();
                let k = input(g, rng, &mut b, DType::F32, [3, 4, 1, 1], -1.0, 1.0)?;
                let x = input(g, rng, &mut b, DType::F32, [11, 4, 2, 1], -1.0, 1.0)?;
                let r = g.im2col(k, x, [2, 0], [1, 0], [2, 1], false, dt)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

/// A batch of random `n x n` matrices with a dominant diagonal (in `[2, 3)`), as f32 bytes.
fn dominant(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    n: u64,
    batch: [u64; 2],
) -> Result<TensorId> {
    let a = g.input("a", DType::F32, [n, n, batch[0], batch[1]])?;
    let mut bytes = Vec::new();
    for _ in 0..batch[0] * batch[1] {
        for r in 0..n {
            for c in 0..n {
                let v = if r == c {
                    rng.uniform(2.0, 3.0)
                } else {
                    rng.uniform(-0.5, 0.5)
                };
                bytes.extend(v.to_le_bytes());
            }
        }
    }
    b.inputs.push((a, bytes));
    Ok(a)
}

fn solve_tri_cases(out: &mut Vec<Case>) {
    for left in [true, false] {
        for lower in [true, false] {
            for uni in [false, true] {
                let (n, k, batch) = (9u64, 5u64, [2u64, 2u64]);
                let desc = format!(
                    "SOLVE_TRI f32 left={left} lower={lower} uni={uni} n={n} k={k} batch {batch:?}"
                );
                out.push(case("SOLVE_TRI", desc, MATMUL, move |g, rng| {
                    let mut b = Built::default();
                    let a = dominant(g, rng, &mut b, n, batch)?;
                    let be = if left {
                        [k, n, batch[0], batch[1]]
                    } else {
                        [n, k, batch[0], batch[1]]
                    };
                    let rhs = input(g, rng, &mut b, DType::F32, be, -1.0, 1.0)?;
                    let r = g.solve_tri(a, rhs, left, lower, uni)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
    }
    out.push(case(
        "SOLVE_TRI",
        "SOLVE_TRI f32 left lower transposed b [7,3]".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let a = dominant(g, rng, &mut b, 7, [1, 1])?;
            let rhs = input(g, rng, &mut b, DType::F32, [7, 3, 1, 1], -1.0, 1.0)?;
            let rt = g.transpose(rhs)?;
            let r = g.solve_tri(a, rt, true, true, false)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
}

/// Adds the sequence and convolution cases.
pub(super) fn add(out: &mut Vec<Case>) {
    ssm_conv_cases(out);
    conv_cases(out);
    solve_tri_cases(out);
}
