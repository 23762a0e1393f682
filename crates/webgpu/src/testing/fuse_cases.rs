//! Op-table cases of the fusions in `ops/fuse.rs`: each graph holds a pattern the WebGPU
//! backend plans as one dispatch (the CPU runs it node by node), and a near miss it must not
//! fuse. The op name is the pattern's, prefixed `FUSED`.

use wgllm_core::op::{BinaryOp, GluOp, RopeMode, UnaryOp};
use wgllm_core::DType;

use super::cases::{case, distinct_rows, f16_tol, input, product_tol, weight, MATMUL};
use super::nn_cases::{freq_factors, rope_params};
use super::{random_bytes, Built, Case};

fn norm_mul_cases(out: &mut Vec<Case>) {
    for (rms, ne) in [(true, [64u64, 5, 2, 1]), (false, [96, 3, 1, 1])] {
        let name = if rms { "rms_norm" } else { "norm" };
        let desc = format!("FUSED {name} x weight {ne:?}");
        out.push(case("FUSED_NORM_MUL", desc, MATMUL, move |g, rng| {
            let mut b = Built::default();
            let x = input(g, rng, &mut b, DType::F32, ne, -2.0, 2.0)?;
            let w = weight(g, rng, DType::F32, [ne[0], 1, 1, 1])?;
            let h = if rms {
                g.rms_norm(x, 1e-6)?
            } else {
                g.norm(x, 1e-5)?
            };
            let r = g.mul(h, w)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
    // Not fused: the normalized rows are also an output.
    out.push(case(
        "FUSED_NORM_MUL",
        "FUSED rms_norm x weight, norm also an output (unfused)".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let x = input(g, rng, &mut b, DType::F32, [64, 3, 1, 1], -2.0, 2.0)?;
            let w = weight(g, rng, DType::F32, [64, 1, 1, 1])?;
            let h = g.rms_norm(x, 1e-6)?;
            let r = g.mul(h, w)?;
            g.mark_output(h)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
}

/// Two RMS norms × weights (a QK-norm layer's q and k heads: rows of `d`, `ha` and `hb` heads,
/// `n` tokens): paired into one dispatch, or not when `eps_b` differs or `read_between` (the
/// first's result read before the second's norm).
fn norm_pair_case((d, ha, hb, n): (u64, u64, u64, u64), eps_b: f32, read_between: bool) -> Case {
    let desc = format!(
        "FUSED rms_norm x weight pair [{d},{ha},{n}] + [{d},{hb},{n}] (eps b {eps_b:e}, read between: {read_between})"
    );
    case("FUSED_NORM_MUL", desc, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let q = input(g, rng, &mut b, DType::F32, [d, ha, n, 1], -2.0, 2.0)?;
        let k = input(g, rng, &mut b, DType::F32, [d, hb, n, 1], -2.0, 2.0)?;
        let (wq, wk) = (
            weight(g, rng, DType::F32, [d, 1, 1, 1])?,
            weight(g, rng, DType::F32, [d, 1, 1, 1])?,
        );
        let qn = g.rms_norm(q, 1e-6)?;
        let qn = g.mul(qn, wq)?;
        let mut k_in = k;
        if read_between {
            let s = g.sum_rows(qn)?;
            let s = g.reshape(s, [1, ha, n, 1])?;
            let s = g.view(s, [1, hb, n, 1], g.node(s).layout.nb, 0)?;
            k_in = g.add(k, s)?;
        }
        let kn = g.rms_norm(k_in, eps_b)?;
        let kn = g.mul(kn, wk)?;
        g.mark_output(qn)?;
        g.mark_output(kn)?;
        Ok(b)
    })
}

fn norm_pair_cases(out: &mut Vec<Case>) {
    out.push(norm_pair_case((128, 8, 2, 3), 1e-6, false));
    out.push(norm_pair_case((64, 3, 1, 1), 1e-6, false));
    out.push(norm_pair_case((64, 3, 1, 2), 1e-5, false));
    out.push(norm_pair_case((64, 4, 2, 2), 1e-6, true));
}

fn mat_vec_add_cases(out: &mut Vec<Case>) {
    for (wt, k, m, n, residual_first) in [
        (DType::Q4_0, 256u64, 33u64, 1u64, false),
        (DType::Q4_K, 512, 20, 3, true),
        (DType::F16, 128, 17, 8, false),
        // 4 rows per workgroup, a partial last group.
        (DType::Q4_0, 64, 8300, 1, false),
    ] {
        let desc = format!(
            "FUSED mul_mat {wt} k={k} m={m} n={n} + residual (residual first: {residual_first})"
        );
        out.push(case("FUSED_MUL_MAT_ADD", desc, MATMUL, move |g, rng| {
            let mut b = Built::default();
            let w = weight(g, rng, wt, [k, m, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
            let res = input(g, rng, &mut b, DType::F32, [m, n, 1, 1], -1.0, 1.0)?;
            let y = g.mul_mat(w, x)?;
            let r = if residual_first {
                g.add(res, y)?
            } else {
                g.add(y, res)?
            };
            g.mark_output(r)?;
            Ok(b)
        }));
    }
    // The activation's last reader is the absorbed product: the arena must keep it alive
    // until the fused kernel runs (the sum could otherwise take its bytes).
    out.push(case(
        "FUSED_MUL_MAT_ADD",
        "FUSED mul_mat q4_0 + residual, activation computed just before".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let w = weight(g, rng, DType::Q4_0, [64, 64, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [64, 1, 1, 1], -1.0, 1.0)?;
            let res = input(g, rng, &mut b, DType::F32, [64, 1, 1, 1], -1.0, 1.0)?;
            let xs = g.scale(x, 0.5, 0.25)?;
            let y = g.mul_mat(w, xs)?;
            let r = g.add(res, y)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    // Not fused: the product is used twice.
    out.push(case(
        "FUSED_MUL_MAT_ADD",
        "FUSED mul_mat q8_0 + residual, product used twice (unfused)".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let w = weight(g, rng, DType::Q8_0, [128, 9, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [128, 2, 1, 1], -1.0, 1.0)?;
            let res = input(g, rng, &mut b, DType::F32, [9, 2, 1, 1], -1.0, 1.0)?;
            let y = g.mul_mat(w, x)?;
            let r = g.add(y, res)?;
            let r2 = g.mul(r, y)?;
            g.mark_output(r2)?;
            Ok(b)
        },
    ));
}

/// A prefill product with its bias and residual adds (`mul_mat_coop.wgsl` with INIT where
/// cooperative matrices run): edge tiles, a split along k, a weight of 128-column tiles.
fn coop_addend_cases(out: &mut Vec<Case>) {
    for (wt, k, m, n, bias, res) in [
        (DType::F16, 64u64, 200u64, 100u64, true, true),
        (DType::Q4_0, 2048, 256, 64, true, true),
        (DType::Q8_0, 128, 128, 40, true, false),
        (DType::F16, 96, 384, 130, false, true),
        (DType::Q4_K, 256, 1024, 520, true, true),
    ] {
        let desc =
            format!("FUSED mul_mat {wt} k={k} m={m} n={n} + bias: {bias}, + residual: {res}");
        out.push(case(
            "FUSED_MUL_MAT_ADD",
            desc,
            product_tol(n),
            move |g, rng| {
                let mut b = Built::default();
                let w = weight(g, rng, wt, [k, m, 1, 1])?;
                let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
                let mut y = g.mul_mat(w, x)?;
                if bias {
                    let bv = input(g, rng, &mut b, DType::F32, [m, 1, 1, 1], -1.0, 1.0)?;
                    y = g.add(y, bv)?;
                }
                if res {
                    let r = input(g, rng, &mut b, DType::F32, [m, n, 1, 1], -1.0, 1.0)?;
                    y = g.add(r, y)?;
                }
                g.mark_output(y)?;
                Ok(b)
            },
        ));
    }
    // An FFN's first layer: the activation of a product (and its bias).
    for (wt, k, m, n, bias, op) in [
        (DType::F16, 64u64, 300u64, 70u64, true, UnaryOp::Gelu),
        (DType::Q8_0, 2048, 128, 32, true, UnaryOp::GeluErf),
        (DType::F16, 128, 512, 200, false, UnaryOp::Silu),
    ] {
        let desc = format!("FUSED {op:?}(mul_mat {wt} k={k} m={m} n={n} + bias: {bias})");
        out.push(case(
            "FUSED_MUL_MAT_ACT",
            desc,
            product_tol(n),
            move |g, rng| {
                let mut b = Built::default();
                let w = weight(g, rng, wt, [k, m, 1, 1])?;
                let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
                let mut y = g.mul_mat(w, x)?;
                if bias {
                    let bv = input(g, rng, &mut b, DType::F32, [m, 1, 1, 1], -1.0, 1.0)?;
                    y = g.add(y, bv)?;
                }
                let y = g.unary(y, op)?;
                g.mark_output(y)?;
                Ok(b)
            },
        ));
    }
    // The biased product is also an output: only the bias is fused.
    out.push(case(
        "FUSED_MUL_MAT_ADD",
        "FUSED mul_mat f16 + bias, also an output, + residual".into(),
        product_tol(48),
        |g, rng| {
            let mut b = Built::default();
            let w = weight(g, rng, DType::F16, [64, 128, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [64, 48, 1, 1], -1.0, 1.0)?;
            let bv = input(g, rng, &mut b, DType::F32, [128, 1, 1, 1], -1.0, 1.0)?;
            let r = input(g, rng, &mut b, DType::F32, [128, 48, 1, 1], -1.0, 1.0)?;
            let y = g.mul_mat(w, x)?;
            let y = g.add(y, bv)?;
            let z = g.add(y, r)?;
            g.mark_output(y)?;
            g.mark_output(z)?;
            Ok(b)
        },
    ));
}

fn glu_cases(out: &mut Vec<Case>) {
    for (wt, k, m, n, op) in [
        (DType::Q4_0, 256u64, 40u64, 1u64, GluOp::Swiglu),
        (DType::Q4_K, 512, 20, 3, GluOp::Swiglu),
        (DType::Q6_K, 256, 9, 2, GluOp::Geglu),
        (DType::Q8_0, 1088, 13, 1, GluOp::Swiglu),
        (DType::Q5_0, 128, 7, 8, GluOp::Reglu),
        (DType::F32, 64, 17, 5, GluOp::Swiglu),
        (DType::F16, 96, 6, 1, GluOp::GegluErf),
        // 4 rows per workgroup, a partial last group.
        (DType::Q4_0, 64, 8300, 1, GluOp::Swiglu),
        // 2 rows per workgroup.
        (DType::Q4_K, 256, 2100, 2, GluOp::Swiglu),
        // 64 sums (4 rows × 8 columns × 2 weights) over 32 lanes with int8 activations: each
        // lane reduces two of them alone; with f32 ones, 32 sums over 128 lanes, 4 lanes a sum.
        (DType::Q4_0, 64, 4200, 8, GluOp::Swiglu),
    ] {
        let desc = format!(
            "FUSED {} of mul_mat {wt} k={k} m={m} n={n} (gate, up)",
            op.name()
        );
        out.push(case("FUSED_GLU", desc, MATMUL, move |g, rng| {
            let mut b = Built::default();
            let wg = weight(g, rng, wt, [k, m, 1, 1])?;
            let wu = weight(g, rng, wt, [k, m, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
            let gate = g.mul_mat(wg, x)?;
            let up = g.mul_mat(wu, x)?;
            let r = g.glu_split(gate, up, op)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
    // Not fused: gate and up read different activations.
    out.push(case(
        "FUSED_GLU",
        "FUSED swiglu of mul_mat f16 over two activations (unfused)".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let wg = weight(g, rng, DType::F16, [64, 8, 1, 1])?;
            let wu = weight(g, rng, DType::F16, [64, 8, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [64, 1, 1, 1], -1.0, 1.0)?;
            let y = input(g, rng, &mut b, DType::F32, [64, 1, 1, 1], -1.0, 1.0)?;
            let gate = g.mul_mat(wg, x)?;
            let up = g.mul_mat(wu, y)?;
            let r = g.glu_split(gate, up, GluOp::Swiglu)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
}

fn qkv_cases(out: &mut Vec<Case>) {
    // (weight dtype, k, rows of q, k, v, activation columns): GQA-like shapes, the int8 and
    // float decoders, rows that leave partial workgroups.
    for (wt, k, rows, n) in [
        (DType::Q4_0, 128u64, [64u64, 16, 16], 1u64),
        (DType::Q4_K, 256, [96, 32, 32], 1),
        (DType::Q8_0, 64, [2100, 300, 300], 1),
        (DType::F16, 96, [33, 7, 7], 3),
        (DType::Q6_K, 256, [40, 24, 16], 2),
    ] {
        let desc = format!("FUSED q/k/v mul_mat {wt} k={k} rows {rows:?} n={n}");
        out.push(case("FUSED_QKV", desc, MATMUL, move |g, rng| {
            let mut b = Built::default();
            let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
            let mut ys = Vec::new();
            for m in rows {
                let w = weight(g, rng, wt, [k, m, 1, 1])?;
                ys.push(g.mul_mat(w, x)?);
            }
            // Consumers after all three products, as rope and set_rows are.
            for y in ys {
                let y = g.scale(y, 2.0, 0.0)?;
                g.mark_output(y)?;
            }
            Ok(b)
        }));
    }
    // Not fused: the first product is read before the third is computed.
    out.push(case(
        "FUSED_QKV",
        "FUSED q/k/v mul_mat q4_0, q read before v (unfused)".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let x = input(g, rng, &mut b, DType::F32, [64, 1, 1, 1], -1.0, 1.0)?;
            let wq = weight(g, rng, DType::Q4_0, [64, 32, 1, 1])?;
            let wk = weight(g, rng, DType::Q4_0, [64, 8, 1, 1])?;
            let wv = weight(g, rng, DType::Q4_0, [64, 8, 1, 1])?;
            let q = g.mul_mat(wq, x)?;
            let k = g.mul_mat(wk, x)?;
            let qs = g.scale(q, 2.0, 0.0)?;
            let v = g.mul_mat(wv, x)?;
            for t in [qs, k, v] {
                g.mark_output(t)?;
            }
            Ok(b)
        },
    ));
}

/// Which products read the normed activations in a norm-prologue case.
#[derive(Clone, Copy, Debug)]
enum Readers {
    /// One product (an output head).
    One,
    /// Gate and up of a GLU.
    Glu,
    /// q, k and v.
    Qkv,
}

/// `rms_norm(h) · g` read by `readers` products of weights `wt` (rows `m`, or m, m/4, m/4 for
/// q/k/v), fused into them; `also_read`: the normed activations are also an output, which
/// keeps the norm a dispatch of its own.
fn norm_product_case(readers: Readers, wt: DType, k: u64, m: u64, n: u64, also_read: bool) -> Case {
    let miss = if also_read {
        ", normed activations also an output (unfused)"
    } else {
        ""
    };
    let desc =
        format!("FUSED rms_norm x weight into {readers:?} mul_mat {wt} k={k} m={m} n={n}{miss}");
    case("FUSED_NORM_MAT_VEC", desc, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let h = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -2.0, 2.0)?;
        let w = weight(g, rng, DType::F32, [k, 1, 1, 1])?;
        let normed = g.rms_norm(h, 1e-5)?;
        let x = g.mul(normed, w)?;
        let product = |g: &mut wgllm_core::Graph, rng: &mut super::Rng, m: u64| {
            let w = weight(g, rng, wt, [k, m, 1, 1])?;
            g.mul_mat(w, x)
        };
        let outs = match readers {
            Readers::One => vec![product(g, rng, m)?],
            Readers::Glu => {
                let gate = product(g, rng, m)?;
                let up = product(g, rng, m)?;
                vec![g.glu_split(gate, up, GluOp::Swiglu)?]
            }
            Readers::Qkv => {
                let ys = [m, m / 4, m / 4].map(|m| product(g, rng, m));
                let mut outs = Vec::new();
                for y in ys {
                    outs.push(g.scale(y?, 2.0, 0.0)?);
                }
                outs
            }
        };
        for y in outs {
            g.mark_output(y)?;
        }
        if also_read {
            g.mark_output(x)?;
        }
        Ok(b)
    })
}

fn norm_product_cases(out: &mut Vec<Case>) {
    for (readers, wt, k, m, n) in [
        (Readers::One, DType::Q4_0, 256u64, 40u64, 1u64),
        (Readers::One, DType::F16, 96, 2100, 3),
        (Readers::One, DType::Q6_K, 512, 33, 8),
        (Readers::Glu, DType::Q4_K, 256, 20, 1),
        (Readers::Glu, DType::Q8_0, 1088, 13, 2),
        (Readers::Glu, DType::F32, 64, 17, 5),
        (Readers::Qkv, DType::Q4_1, 128, 64, 1),
        (Readers::Qkv, DType::Q5_0, 64, 2100, 1),
        (Readers::Qkv, DType::BF16, 96, 36, 4),
    ] {
        out.push(norm_product_case(readers, wt, k, m, n, false));
    }
    out.push(norm_product_case(
        Readers::Qkv,
        DType::Q4_0,
        64,
        32,
        1,
        true,
    ));
    out.push(norm_product_case(Readers::One, DType::Q8_0, 64, 8, 2, true));
}

/// Rope tolerance as the ROPE cases': GPU sin/cos are not correctly rounded.
const ROPE_NMSE: f64 = 1e-7;

fn rope_pair_cases(out: &mut Vec<Case>) {
    // (mode, head_dim, n_dims, q heads, k heads, YaRN, frequency factors, k read before q's rope)
    let specs = [
        (
            RopeMode::Normal,
            64u64,
            64u32,
            4u64,
            2u64,
            false,
            false,
            false,
        ),
        (RopeMode::Neox, 64, 32, 6, 2, true, true, false),
        (RopeMode::Neox, 33, 16, 3, 3, false, false, false),
        (RopeMode::Normal, 64, 64, 4, 2, false, false, true),
    ];
    for (mode, hd, n_dims, hq, hk, yarn, ff, early) in specs {
        let desc = match early {
            false => format!(
                "FUSED rope of q and k {mode:?} head_dim={hd} n_dims={n_dims} heads {hq}/{hk} yarn={yarn} ff={ff}"
            ),
            true => format!("FUSED rope of q and k {mode:?}, q's rope read before k's (unfused)"),
        };
        out.push(case("FUSED_ROPE", desc, ROPE_NMSE, move |g, rng| {
            let mut b = Built::default();
            let q = input(g, rng, &mut b, DType::F32, [hd, hq, 5, 1], -2.0, 2.0)?;
            let k = input(g, rng, &mut b, DType::F32, [hd, hk, 5, 1], -2.0, 2.0)?;
            let pos = input(g, rng, &mut b, DType::I32, [5, 1, 1, 1], 0.0, 50.0)?;
            let f = freq_factors(g, rng, &mut b, n_dims, ff)?;
            let p = rope_params(mode, n_dims, yarn);
            let rq = g.rope(q, pos, f, p)?;
            let rq = match early {
                true => g.scale(rq, 2.0, 0.0)?,
                false => rq,
            };
            let rk = g.rope(k, pos, f, p)?;
            // Consumers after both ropes, as the KV store and attention are.
            for r in [rq, rk] {
                let r = g.scale(r, 0.5, 0.0)?;
                g.mark_output(r)?;
            }
            Ok(b)
        }));
    }
}

/// The attention input of a decode or prefill step: q and k roped at the step's positions, the
/// rotated k (reshaped to rows of head_dim · heads) and v stored into K and V caches at the
/// step's rows. `near_miss`: the rotated k is also an output, which keeps the stores apart.
fn kv_store_case(
    mode: RopeMode,
    (hd, hq, hk, n): (u64, u64, u64, u64),
    cache: DType,
    idx_t: DType,
    ff: bool,
    near_miss: bool,
) -> Case {
    let miss = if near_miss {
        ", rotated k also an output (unfused)"
    } else {
        ""
    };
    let desc = format!(
        "FUSED rope of q and k {mode:?} head_dim={hd} heads {hq}/{hk} n={n} ff={ff} into {cache} \
         caches by {idx_t}{miss}"
    );
    case(
        "FUSED_KV_STORE",
        desc,
        f16_tol(cache, ROPE_NMSE),
        move |g, rng| {
            let mut b = Built::default();
            let ctx = 9;
            let row = hd * hk;
            let q = input(g, rng, &mut b, DType::F32, [hd, hq, n, 1], -2.0, 2.0)?;
            let k = input(g, rng, &mut b, DType::F32, [hd, hk, n, 1], -2.0, 2.0)?;
            let v = input(g, rng, &mut b, DType::F32, [row, n, 1, 1], -2.0, 2.0)?;
            let pos = input(g, rng, &mut b, DType::I32, [n, 1, 1, 1], 0.0, 50.0)?;
            let idx = g.input("idx", idx_t, [n, 1, 1, 1])?;
            b.inputs
                .push((idx, distinct_rows(rng, ctx, n as usize, idx_t)));
            let mut caches = Vec::new();
            for name in ["cache_k", "cache_v"] {
                let c = g.state(name, cache, [row, ctx, 1, 1])?;
                b.states
                    .push((c, random_bytes(rng, cache, row * ctx, -1.0, 1.0)?));
                caches.push(c);
            }
            let f = freq_factors(g, rng, &mut b, hd as u32, ff)?;
            let p = rope_params(mode, hd as u32, false);
            let rq = g.rope(q, pos, f, p)?;
            let rk = g.rope(k, pos, f, p)?;
            let rows = g.reshape(rk, [row, n, 1, 1])?;
            let ck = g.set_rows(caches[0], rows, idx)?;
            let cv = g.set_rows(caches[1], v, idx)?;
            // Read after the stores, as attention reads them.
            for t in [rq, ck, cv] {
                g.mark_output(t)?;
            }
            if near_miss {
                g.mark_output(rk)?;
            }
            Ok(b)
        },
    )
}

fn kv_store_cases(out: &mut Vec<Case>) {
    let llama = (16, 8, 2, 1);
    // (mode, (head_dim, q heads, kv heads, tokens), cache, indices, frequency factors, near
    // miss): odd rows of v (one item copies the last value alone), prefill-sized steps.
    let specs = [
        (
            RopeMode::Normal,
            llama,
            DType::F16,
            DType::I64,
            false,
            false,
        ),
        (RopeMode::Neox, llama, DType::F32, DType::I32, true, false),
        (
            RopeMode::Neox,
            (32, 4, 4, 3),
            DType::F16,
            DType::I32,
            false,
            false,
        ),
        (
            RopeMode::Normal,
            (10, 3, 1, 5),
            DType::F32,
            DType::I64,
            true,
            false,
        ),
        (
            RopeMode::Neox,
            (18, 2, 1, 7),
            DType::F16,
            DType::I64,
            false,
            false,
        ),
        (RopeMode::Normal, llama, DType::F16, DType::I64, false, true),
    ];
    for (mode, shape, cache, idx, ff, miss) in specs {
        out.push(kv_store_case(mode, shape, cache, idx, ff, miss));
    }
}

/// The shape of an attention-input case: weights, rope, heads, tokens, caches.
#[derive(Clone, Copy, Debug)]
struct AttnInput {
    wt: DType,
    /// Row length of the weights (the model width).
    emb: u64,
    mode: RopeMode,
    /// (head_dim, q heads, kv heads, tokens)
    shape: (u64, u64, u64, u64),
    n_dims: u32,
    norm: bool,
    cache: DType,
    idx: DType,
    ff: bool,
    yarn: bool,
}

/// A near miss of the attention-input pattern, planned as smaller fusions.
#[derive(Clone, Copy, PartialEq)]
enum AttnMiss {
    None,
    /// The k product is also an output, which keeps it a dispatch of its own.
    KOutput,
    /// k's heads are twice the size of q's (half as many): the ropes pair other elements.
    KHeads,
}

/// A decoder block's attention input: `rms_norm(h) · g` (with `norm`), the q, k and v
/// products, q and k reshaped to heads and roped at the step's positions, the rotated k (as
/// rows) and v stored into K and V caches; `miss` makes it a near miss.
fn attention_input_case(a: AttnInput, miss: AttnMiss) -> Case {
    let miss_desc = match miss {
        AttnMiss::None => "",
        AttnMiss::KOutput => ", k product also an output (unfused)",
        AttnMiss::KHeads => ", k heads twice q's size (unfused)",
    };
    let desc = format!("FUSED attention input {a:?}{miss_desc}");
    let tol = f16_tol(a.cache, ROPE_NMSE);
    case("FUSED_ATTN_INPUT", desc, tol, move |g, rng| {
        let mut b = Built::default();
        let (hd, hq, hk, n) = a.shape;
        let (ctx, row) = (11, hd * hk);
        let h = input(g, rng, &mut b, DType::F32, [a.emb, n, 1, 1], -2.0, 2.0)?;
        let x = match a.norm {
            true => {
                let w = weight(g, rng, DType::F32, [a.emb, 1, 1, 1])?;
                let normed = g.rms_norm(h, 1e-5)?;
                g.mul(normed, w)?
            }
            false => h,
        };
        let mut ys = Vec::new();
        for m in [hd * hq, row, row] {
            let w = weight(g, rng, a.wt, [a.emb, m, 1, 1])?;
            ys.push(g.mul_mat(w, x)?);
        }
        let q = g.reshape(ys[0], [hd, hq, n, 1])?;
        let k = match miss {
            AttnMiss::KHeads => g.reshape(ys[1], [2 * hd, hk / 2, n, 1])?,
            _ => g.reshape(ys[1], [hd, hk, n, 1])?,
        };
        let pos = input(g, rng, &mut b, DType::I32, [n, 1, 1, 1], 0.0, 50.0)?;
        let idx = g.input("idx", a.idx, [n, 1, 1, 1])?;
        b.inputs
            .push((idx, distinct_rows(rng, ctx, n as usize, a.idx)));
        let mut caches = Vec::new();
        for name in ["cache_k", "cache_v"] {
            let c = g.state(name, a.cache, [row, ctx, 1, 1])?;
            b.states
                .push((c, random_bytes(rng, a.cache, row * ctx, -1.0, 1.0)?));
            caches.push(c);
        }
        let f = freq_factors(g, rng, &mut b, a.n_dims, a.ff)?;
        let p = rope_params(a.mode, a.n_dims, a.yarn);
        let rq = g.rope(q, pos, f, p)?;
        let rk = g.rope(k, pos, f, p)?;
        let rows = g.reshape(rk, [row, n, 1, 1])?;
        let ck = g.set_rows(caches[0], rows, idx)?;
        let cv = g.set_rows(caches[1], ys[2], idx)?;
        for t in [rq, ck, cv] {
            g.mark_output(t)?;
        }
        if miss == AttnMiss::KOutput {
            g.mark_output(ys[1])?;
        }
        Ok(b)
    })
}

fn attention_input_cases(out: &mut Vec<Case>) {
    let base = AttnInput {
        wt: DType::Q4_0,
        emb: 64,
        mode: RopeMode::Normal,
        shape: (64, 4, 2, 1),
        n_dims: 64,
        norm: true,
        cache: DType::F16,
        idx: DType::I64,
        ff: false,
        yarn: false,
    };
    let specs = [
        base,
        // Partial rotation with YaRN and frequency factors, three tokens, f32 caches.
        AttnInput {
            wt: DType::Q8_0,
            mode: RopeMode::Neox,
            shape: (32, 6, 2, 3),
            n_dims: 16,
            norm: false,
            cache: DType::F32,
            idx: DType::I32,
            ff: true,
            yarn: true,
            ..base
        },
        AttnInput {
            wt: DType::F16,
            mode: RopeMode::Neox,
            shape: (64, 2, 1, 8),
            idx: DType::I32,
            ..base
        },
        AttnInput {
            wt: DType::Q4_K,
            emb: 256,
            shape: (16, 8, 2, 1),
            n_dims: 12,
            cache: DType::F32,
            ff: true,
            ..base
        },
        AttnInput {
            wt: DType::Q6_K,
            emb: 256,
            mode: RopeMode::Neox,
            shape: (128, 4, 1, 2),
            ..base
        },
        // Pairs past the rotated ones, a partial last workgroup.
        AttnInput {
            wt: DType::Q5_0,
            mode: RopeMode::Neox,
            shape: (18, 3, 1, 1),
            n_dims: 10,
            norm: false,
            idx: DType::I32,
            ..base
        },
        // 4,096 rows: four a workgroup.
        AttnInput {
            mode: RopeMode::Neox,
            shape: (64, 48, 8, 1),
            ff: true,
            ..base
        },
    ];
    for a in specs {
        out.push(attention_input_case(a, AttnMiss::None));
    }
    out.push(attention_input_case(base, AttnMiss::KOutput));
    out.push(attention_input_case(base, AttnMiss::KHeads));
}

/// Decode attention (f16 cache, causal mask over the written keys) of `n_q` query rows whose
/// reshaped result feeds a product plus residual, as every block's attention output; with
/// `also_read` the attention result is an output too (unfused). Under int8 activations the
/// attention stores its result rounded to int8 for the product (`FUSED_ATTN_OUTPUT`), a column
/// per query row.
fn attention_output_case(
    wt: DType,
    (hd, heads, kv_heads, n_kv, n_q): (u64, u64, u64, u64, u64),
    also_read: bool,
) -> Case {
    let miss = if also_read {
        ", attention also an output (unfused)"
    } else {
        ""
    };
    let desc = format!(
        "FUSED attention {heads}/{kv_heads} heads of {hd}, {n_kv} keys, {n_q} rows into mul_mat {wt} + residual{miss}"
    );
    case("FUSED_ATTN_OUTPUT", desc, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let q = input(g, rng, &mut b, DType::F32, [hd, n_q, heads, 1], -1.0, 1.0)?;
        let kv = [hd, n_kv, kv_heads, 1];
        let k = input(g, rng, &mut b, DType::F16, kv, -1.0, 1.0)?;
        let v = input(g, rng, &mut b, DType::F16, kv, -1.0, 1.0)?;
        let mask = g.input("mask", DType::F16, [n_kv, n_q, 1, 1])?;
        // Row i sees the first 3/4 of the cache and i keys more; the rest is not written yet:
        // -inf (f16 0xfc00).
        let rows = (0..n_q).flat_map(|i| {
            (0..n_kv).flat_map(move |j| match j < n_kv * 3 / 4 + i {
                true => [0u8, 0],
                false => [0, 0xfc],
            })
        });
        b.inputs.push((mask, rows.collect()));
        let att = g.flash_attn_ext(q, k, v, Some(mask), None, 0.125, 0.0, 0.0)?;
        let x = g.reshape(att, [hd * heads, n_q, 1, 1])?;
        let w = weight(g, rng, wt, [hd * heads, 48, 1, 1])?;
        let res = input(g, rng, &mut b, DType::F32, [48, n_q, 1, 1], -1.0, 1.0)?;
        let y = g.mul_mat(w, x)?;
        let r = g.add(y, res)?;
        g.mark_output(r)?;
        if also_read {
            g.mark_output(att)?;
        }
        Ok(b)
    })
}

fn attention_output_cases(out: &mut Vec<Case>) {
    out.push(attention_output_case(DType::Q4_0, (64, 4, 2, 40, 1), false));
    out.push(attention_output_case(DType::Q4_0, (64, 4, 2, 40, 3), false));
    out.push(attention_output_case(
        DType::Q4_K,
        (128, 2, 1, 300, 1),
        false,
    ));
    out.push(attention_output_case(DType::Q4_0, (64, 4, 2, 40, 1), true));
}

/// A mixture-of-experts FFN's weighted sum of its `n_used` experts' outputs [e, n_used, n]
/// (`moe_ffn`'s `mul` and slot adds), with a residual added after (`Some(false)`) or before
/// (`Some(true)`) or not; `slot_out`: slot 1's view is also an output, which keeps the
/// pattern unfused.
fn expert_sum_case(
    (e, n_used, n): (u64, u64, u64),
    residual: Option<bool>,
    slot_out: bool,
) -> Case {
    let desc = format!(
        "FUSED expert sum [{e},{n_used},{n}] x [1,{n_used},{n}] (residual first: {residual:?}, slot out: {slot_out})"
    );
    case("FUSED_EXPERT_SUM", desc, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let x = input(g, rng, &mut b, DType::F32, [e, n_used, n, 1], -2.0, 2.0)?;
        let w = input(g, rng, &mut b, DType::F32, [1, n_used, n, 1], 0.0, 1.0)?;
        let y = g.mul(x, w)?;
        let nb = g.node(y).layout.nb;
        let mut slots = Vec::new();
        for i in 0..n_used {
            slots.push(g.view(y, [e, n, 1, 1], [nb[0], nb[2], nb[3], nb[3]], i * nb[1])?);
        }
        let mut r = slots[0];
        for &v in &slots[1..] {
            r = g.add(r, v)?;
        }
        if let Some(first) = residual {
            let h = input(g, rng, &mut b, DType::F32, [e, n, 1, 1], -2.0, 2.0)?;
            r = if first { g.add(h, r)? } else { g.add(r, h)? };
        }
        g.mark_output(r)?;
        if slot_out {
            g.mark_output(slots[1])?;
        }
        Ok(b)
    })
}

fn expert_sum_cases(out: &mut Vec<Case>) {
    for shape in [(64, 8, 1), (33, 2, 5), (2048, 8, 3)] {
        out.push(expert_sum_case(shape, None, false));
    }
    out.push(expert_sum_case((2048, 8, 1), Some(false), false));
    out.push(expert_sum_case((33, 3, 4), Some(true), false));
    out.push(expert_sum_case((64, 4, 2), None, true));
    out.push(expert_sum_case((64, 4, 2), Some(false), true));
}

/// A mixture-of-experts router over `n_expert` experts for `n` tokens: the softmax of random
/// logits, the top `k` ids and their weights (with `norm` renormalized), both outputs;
/// `probs_out`: the softmax is an output too, which keeps the pattern unfused.
fn expert_router_case((n_expert, k, n): (u64, u32, u64), norm: bool, probs_out: bool) -> Case {
    let desc = format!(
        "FUSED expert router {n_expert} experts, top {k}, {n} tokens (norm: {norm}, probs out: {probs_out})"
    );
    case("FUSED_EXPERT_ROUTER", desc, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let logits = input(g, rng, &mut b, DType::F32, [n_expert, n, 1, 1], -4.0, 4.0)?;
        let probs = g.soft_max(logits, None, None, 1.0, 0.0)?;
        let picked = g.top_k(probs, k)?;
        let rows = g.reshape(probs, [1, n_expert, n, 1])?;
        let mut weights = g.get_rows(rows, picked)?;
        if norm {
            let w = g.reshape(weights, [u64::from(k), n, 1, 1])?;
            let sum = g.sum_rows(w)?;
            weights = g.binary(w, sum, BinaryOp::Div)?;
        }
        g.mark_output(weights)?;
        g.mark_output(picked)?;
        if probs_out {
            g.mark_output(probs)?;
        }
        Ok(b)
    })
}

fn expert_router_cases(out: &mut Vec<Case>) {
    out.push(expert_router_case((128, 8, 3), true, false));
    out.push(expert_router_case((8, 2, 5), false, false));
    out.push(expert_router_case((300, 4, 1), true, false));
    out.push(expert_router_case((64, 6, 2), true, true));
}

/// The GLU of two mul_mat_id products (a mixture-of-experts FFN's gate and up): `n_expert`
/// experts of `wt` [k, m], `n_used` a token for `n` tokens, the same ids for both. Decode
/// shapes fuse (`mul_mat_vec.wgsl` with ID and GLU); a prefill's routed tiles do not.
fn id_glu_case(wt: DType, (k, m): (u64, u64), (n_expert, n_used, n): (u64, u64, u64)) -> Case {
    let desc = format!(
        "FUSED swiglu of mul_mat_id {wt} k={k} m={m} experts={n_expert} used={n_used} n={n} (gate, up)"
    );
    case("FUSED_GLU", desc, product_tol(n), move |g, rng| {
        let mut b = Built::default();
        let wg = weight(g, rng, wt, [k, m, n_expert, 1])?;
        let wu = weight(g, rng, wt, [k, m, n_expert, 1])?;
        let x = input(g, rng, &mut b, DType::F32, [k, 1, n, 1], -1.0, 1.0)?;
        let ids = g.input("ids", DType::I32, [n_used, n, 1, 1])?;
        b.inputs.push((
            ids,
            super::shape_cases::expert_ids(rng, n_used * n, n_expert),
        ));
        let gate = g.mul_mat_id(wg, x, ids)?;
        let up = g.mul_mat_id(wu, x, ids)?;
        let r = g.glu_split(gate, up, GluOp::Swiglu)?;
        g.mark_output(r)?;
        Ok(b)
    })
}

fn id_glu_cases(out: &mut Vec<Case>) {
    out.push(id_glu_case(DType::Q4_K, (256, 70), (8, 2, 1)));
    out.push(id_glu_case(DType::Q4_0, (64, 33), (4, 3, 3)));
    out.push(id_glu_case(DType::F16, (96, 20), (6, 2, 2)));
    out.push(id_glu_case(DType::Q8_0, (64, 40), (4, 2, 40)));
}

/// Appends the fusion cases.
pub(super) fn add(out: &mut Vec<Case>) {
    norm_mul_cases(out);
    norm_pair_cases(out);
    mat_vec_add_cases(out);
    coop_addend_cases(out);
    glu_cases(out);
    qkv_cases(out);
    norm_product_cases(out);
    rope_pair_cases(out);
    kv_store_cases(out);
    attention_input_cases(out);
    attention_output_cases(out);
    expert_sum_cases(out);
    expert_router_cases(out);
    id_glu_cases(out);
}
