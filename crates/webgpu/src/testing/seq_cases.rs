//! Op-table cases of the sequence and convolution ops: ssm_conv, conv_2d and im2col (f32 and
//! f16, strides, padding, dilation, batches, a transposed input), solve_tri (all eight forms on
//! diagonally dominant matrices, so substitution stays well conditioned).
//!
//! Tolerances: im2col copies (exact for f32, one f16 ulp for f16 results); ssm_conv and conv_2d
//! accumulate products in the reference's order, but a GPU may fuse multiply-adds, so they get
//! mul_mat's 1e-9 (f16 results one ulp). solve_tri divides (not correctly rounded on GPUs) and
//! propagates through n substitution steps: 1e-9.
//!
//! ssm_scan (Mamba-1 per-state decays, Mamba-2 per-head decays with grouped B/C, state ids
//! picking and reordering initial states) and gated_delta_net (per-head and per-row decays,
//! tiled q/k heads and sequences, S from 1 to 128), both also on permuted views: each step is a
//! short f32 dot product, but the GPU's exp and log are not correctly rounded and it may fuse
//! multiply-adds, and the difference is carried through the tokens. Inputs keep the recurrences
//! contractive as in the models (negative A, softplus dt; log-decays below 0, beta in [0, 1),
//! unit-norm k), so it does not grow: mul_mat's 1e-9.

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

/// An I32 input holding `vals`.
fn ints(g: &mut Graph, b: &mut Built, vals: &[i32]) -> Result<TensorId> {
    let t = g.input("ids", DType::I32, [vals.len() as u64, 1, 1, 1])?;
    b.inputs
        .push((t, vals.iter().flat_map(|v| v.to_le_bytes()).collect()));
    Ok(t)
}

/// An f32 input whose rows (along dim 0) are random unit vectors.
fn unit_rows(g: &mut Graph, rng: &mut Rng, b: &mut Built, ne: [u64; 4]) -> Result<TensorId> {
    let t = g.input("unit", DType::F32, ne)?;
    let mut bytes = Vec::new();
    for _ in 0..ne[1] * ne[2] * ne[3] {
        let row: Vec<f32> = (0..ne[0]).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-6);
        bytes.extend(row.iter().flat_map(|v| (v / norm).to_le_bytes()));
    }
    b.inputs.push((t, bytes));
    Ok(t)
}

/// (d_state, head_dim, n_head, n_group, n_tokens, ids, n_rs, per-state decays)
type ScanShape = (u64, u64, u64, u64, u64, &'static [i32], u64, bool);

fn ssm_scan_cases(out: &mut Vec<Case>) {
    let shapes: [ScanShape; 5] = [
        (16, 1, 33, 1, 5, &[1, 0], 2, true),
        (7, 3, 5, 1, 1, &[0], 1, true),
        (17, 5, 6, 2, 7, &[2, 0], 3, false),
        (128, 64, 3, 1, 4, &[0], 1, false),
        (16, 9, 4, 4, 1, &[1, 1, 0], 2, false),
    ];
    for (d_state, head_dim, n_head, n_group, n_tokens, ids, n_rs, mamba1) in shapes {
        let n_seqs = ids.len() as u64;
        let desc = format!(
            "SSM_SCAN f32 {} d_state={d_state} head_dim={head_dim} n_head={n_head} \
             n_group={n_group} n_tokens={n_tokens} ids={ids:?} n_rs={n_rs}",
            if mamba1 { "mamba1" } else { "mamba2" }
        );
        out.push(case("SSM_SCAN", desc, MATMUL, move |g, rng| {
            let mut b = Built::default();
            let f = DType::F32;
            let s = input(
                g,
                rng,
                &mut b,
                f,
                [d_state, head_dim, n_head, n_rs],
                -1.0,
                1.0,
            )?;
            let x = input(
                g,
                rng,
                &mut b,
                f,
                [head_dim, n_head, n_tokens, n_seqs],
                -1.0,
                1.0,
            )?;
            let dt = input(g, rng, &mut b, f, [n_head, n_tokens, n_seqs, 1], -3.0, 1.0)?;
            let a_ne = [if mamba1 { d_state } else { 1 }, n_head, 1, 1];
            let a = input(g, rng, &mut b, f, a_ne, -2.0, -0.1)?;
            let bc_ne = [d_state, n_group, n_tokens, n_seqs];
            let bm = input(g, rng, &mut b, f, bc_ne, -1.0, 1.0)?;
            let cm = input(g, rng, &mut b, f, bc_ne, -1.0, 1.0)?;
            let id = ints(g, &mut b, ids)?;
            let r = g.ssm_scan(s, x, dt, a, bm, cm, id)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
}

/// (S, H, H_k, n_tokens, n_seqs, n_seqs_k, per-row decays)
type DeltaShape = (u64, u64, u64, u64, u64, u64, bool);

fn gated_delta_net_cases(out: &mut Vec<Case>) {
    let shapes: [DeltaShape; 6] = [
        (33, 4, 2, 5, 2, 1, false),
        (33, 4, 2, 5, 2, 1, true),
        (128, 2, 2, 3, 1, 1, false),
        (64, 3, 3, 4, 2, 2, true),
        (7, 2, 1, 1, 3, 3, false),
        (1, 2, 2, 3, 1, 1, true),
    ];
    for (s, h, hk, n_tokens, n_seqs, n_seqs_k, per_row) in shapes {
        let desc = format!(
            "GATED_DELTA_NET f32 S={s} H={h} H_k={hk} n_tokens={n_tokens} n_seqs={n_seqs} \
             n_seqs_k={n_seqs_k} g per {}",
            if per_row { "row" } else { "head" }
        );
        out.push(case("GATED_DELTA_NET", desc, MATMUL, move |g, rng| {
            let mut b = Built::default();
            let f = DType::F32;
            let q = unit_rows(g, rng, &mut b, [s, hk, n_tokens, n_seqs_k])?;
            let k = unit_rows(g, rng, &mut b, [s, hk, n_tokens, n_seqs_k])?;
            let v = input(g, rng, &mut b, f, [s, h, n_tokens, n_seqs], -1.0, 1.0)?;
            let g_ne = [if per_row { s } else { 1 }, h, n_tokens, n_seqs];
            let gate = input(g, rng, &mut b, f, g_ne, -1.0, 0.0)?;
            let beta = input(g, rng, &mut b, f, [1, h, n_tokens, n_seqs], 0.0, 1.0)?;
            let state = input(g, rng, &mut b, f, [s, s, h, n_seqs], -0.5, 0.5)?;
            let r = g.gated_delta_net(q, k, v, gate, beta, state)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
}

/// Views as the models pass them: ssm_scan's x and gated_delta_net's q, k, v with the token
/// and head dims swapped (permuted, not contiguous).
fn scan_view_cases(out: &mut Vec<Case>) {
    out.push(case(
        "SSM_SCAN",
        "SSM_SCAN f32 mamba2 permuted x d_state=16 head_dim=8 n_head=3 n_tokens=5".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let f = DType::F32;
            let s = input(g, rng, &mut b, f, [16, 8, 3, 1], -1.0, 1.0)?;
            let x = input(g, rng, &mut b, f, [8, 5, 3, 1], -1.0, 1.0)?;
            let x = g.permute(x, [0, 2, 1, 3])?;
            let dt = input(g, rng, &mut b, f, [3, 5, 1, 1], -3.0, 1.0)?;
            let a = input(g, rng, &mut b, f, [1, 3, 1, 1], -2.0, -0.1)?;
            let bm = input(g, rng, &mut b, f, [16, 1, 5, 1], -1.0, 1.0)?;
            let cm = input(g, rng, &mut b, f, [16, 1, 5, 1], -1.0, 1.0)?;
            let id = ints(g, &mut b, &[0])?;
            let r = g.ssm_scan(s, x, dt, a, bm, cm, id)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    out.push(case(
        "GATED_DELTA_NET",
        "GATED_DELTA_NET f32 permuted q, k, v S=16 H=3 n_tokens=4".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let f = DType::F32;
            let mut qkv = Vec::new();
            for unit in [true, true, false] {
                let t = match unit {
                    true => unit_rows(g, rng, &mut b, [16, 4, 3, 1])?,
                    false => input(g, rng, &mut b, f, [16, 4, 3, 1], -1.0, 1.0)?,
                };
                qkv.push(g.permute(t, [0, 2, 1, 3])?);
            }
            let gate = input(g, rng, &mut b, f, [1, 3, 4, 1], -1.0, 0.0)?;
            let beta = input(g, rng, &mut b, f, [1, 3, 4, 1], 0.0, 1.0)?;
            let state = input(g, rng, &mut b, f, [16, 16, 3, 1], -0.5, 0.5)?;
            let r = g.gated_delta_net(qkv[0], qkv[1], qkv[2], gate, beta, state)?;
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
    ssm_scan_cases(out);
    gated_delta_net_cases(out);
    scan_view_cases(out);
}
