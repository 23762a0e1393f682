//! The check a device's cooperative matrices pass before the planner uses them.
//!
//! wgpu marks cooperative matrices experimental: a driver that offers the 16 × 16 × 16 f16
//! configuration may still get a fragment layout, a conversion or a strided load wrong, and a
//! kernel built on them would then answer garbage without any error. So when a backend opens
//! with them, both cooperative-matrix kernels run one small case whose answer the host knows
//! (`mul_mat_coop.wgsl` on small integers, where f16 operands and f32 sums are exact, its sums
//! starting from a bias and a residual as the fused adds of encoders and prefills run it;
//! `flash_attn_coop.wgsl` against an f64 softmax), with partial tiles at every edge. If either
//! fails, errs or returns a non-finite value, the backend plans without cooperative matrices
//! and says why ([`crate::Capabilities::cooperative_matrix_failure`]). The op table is the
//! full check; this one costs two small dispatches at open.

use half::f16;
use wgllm_core::{Backend, DType, Graph, Result};

use crate::testing::{execute, to_f32, Built};

/// The product's shape: k, m (weight rows: a full and a partial tile of 128), n (a full and a
/// partial 16-column fragment past the coop kernel's 16-column minimum).
const MM: [u64; 3] = [64, 160, 40];
/// The attention's shape: head size (the coop kernel's 128), query rows (past the decode
/// kernel's 8, a partial block of 64), query heads over one K/V head, keys (a partial tile of
/// 32).
const ATTN: [u64; 4] = [128, 24, 2, 40];
/// Largest absolute error the attention may have: its probabilities are f16 (relative error
/// 2⁻¹¹) and every value lies in [-1, 1].
const ATTN_MAX_ERR: f64 = 5e-3;

/// A value in [-1, 1] in steps of 1/8 (exact in f16) for index `i` of a tensor salted `s`.
fn eighths(i: u64, s: u64) -> f32 {
    ((i * 37 + s * 11) % 17) as f32 / 8.0 - 1.0
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A check case: its graph, the bytes of its inputs, and the answer.
struct CheckCase {
    graph: Graph,
    built: Built,
    want: Vec<f32>,
}

/// Runs `case` on `backend` and reads its one output as f32.
async fn run(backend: &dyn Backend, case: &CheckCase) -> Result<Vec<f32>> {
    let out = execute(backend, &case.graph, &case.built).await?;
    to_f32(DType::F32, &out[0])
}

/// The product case, `w · x + bias + residual`: the graph, its inputs and the exact answer.
fn product_case() -> Result<CheckCase> {
    let [k, m, n] = MM;
    let w: Vec<f32> = (0..k * m).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
    let x: Vec<f32> = (0..k * n).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
    let bias: Vec<f32> = (0..m).map(|i| (i % 3) as f32 - 1.0).collect();
    let res: Vec<f32> = (0..m * n).map(|i| ((i * 5) % 9) as f32 - 4.0).collect();
    let mut g = Graph::new();
    let wt = g.input("w", DType::F16, [k, m, 1, 1])?;
    let xt = g.input("x", DType::F32, [k, n, 1, 1])?;
    let bt = g.input("bias", DType::F32, [m, 1, 1, 1])?;
    let rt = g.input("residual", DType::F32, [m, n, 1, 1])?;
    let y = g.mul_mat(wt, xt)?;
    let y = g.add(y, bt)?;
    let y = g.add(rt, y)?;
    g.mark_output(y)?;
    let (k, m, n) = (k as usize, m as usize, n as usize);
    let want = (0..m * n)
        .map(|o| {
            let (i, j) = (o % m, o / m);
            let dot: f32 = (0..k).map(|c| w[i * k + c] * x[j * k + c]).sum();
            dot + bias[i] + res[o]
        })
        .collect();
    let inputs = vec![
        (wt, f16_bytes(&w)),
        (xt, f32_bytes(&x)),
        (bt, f32_bytes(&bias)),
        (rt, f32_bytes(&res)),
    ];
    Ok(CheckCase {
        graph: g,
        built: Built {
            inputs,
            states: Vec::new(),
        },
        want,
    })
}

/// The attention case: q [d, rows, heads], K and V f16 [d, keys], a mask hiding key j from row
/// i past i + 16 (so the first rows see part of a tile); the graph, inputs and an f64 answer.
fn attention_case() -> Result<CheckCase> {
    let [d, rows, heads, keys] = ATTN;
    let q: Vec<f32> = (0..d * rows * heads).map(|i| eighths(i, 1)).collect();
    let kv: Vec<Vec<f32>> = (2..4)
        .map(|s| (0..d * keys).map(|i| eighths(i, s)).collect())
        .collect();
    let hidden = |i: u64, j: u64| j > i + 16;
    let mask: Vec<f32> = (0..rows * keys)
        .map(|o| {
            if hidden(o / keys, o % keys) {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let scale = 1.0 / (d as f32).sqrt();
    let mut g = Graph::new();
    let qt = g.input("q", DType::F32, [d, rows, heads, 1])?;
    let kt = g.input("k", DType::F16, [d, keys, 1, 1])?;
    let vt = g.input("v", DType::F16, [d, keys, 1, 1])?;
    let mt = g.input("mask", DType::F16, [keys, rows, 1, 1])?;
    let r = g.flash_attn_ext(qt, kt, vt, Some(mt), None, scale, 0.0, 0.0)?;
    g.mark_output(r)?;
    let (d, rows, heads, keys) = (d as usize, rows as usize, heads as usize, keys as usize);
    let mut want = vec![0f32; d * heads * rows];
    for h in 0..heads {
        for i in 0..rows {
            let qi = &q[(h * rows + i) * d..][..d];
            let s: Vec<f64> = (0..keys)
                .map(|j| match hidden(i as u64, j as u64) {
                    true => f64::NEG_INFINITY,
                    false => {
                        let kj = &kv[0][j * d..][..d];
                        f64::from(scale)
                            * qi.iter()
                                .zip(kj)
                                .map(|(a, b)| f64::from(a * b))
                                .sum::<f64>()
                    }
                })
                .collect();
            let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let l: f64 = p.iter().sum();
            for c in 0..d {
                let o: f64 = (0..keys).map(|j| p[j] * f64::from(kv[1][j * d + c])).sum();
                want[(i * heads + h) * d + c] = (o / l) as f32;
            }
        }
    }
    let inputs = vec![
        (qt, f32_bytes(&q)),
        (kt, f16_bytes(&kv[0])),
        (vt, f16_bytes(&kv[1])),
        (mt, f16_bytes(&mask)),
    ];
    Ok(CheckCase {
        graph: g,
        built: Built {
            inputs,
            states: Vec::new(),
        },
        want,
    })
}

/// The largest absolute difference, infinite where either side is not finite or the lengths
/// differ.
fn max_err(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    got.iter()
        .zip(want)
        .map(|(g, w)| match g.is_finite() {
            true => f64::from((g - w).abs()),
            false => f64::INFINITY,
        })
        .fold(0.0, f64::max)
}

/// Runs both cases on `backend` (whose device has cooperative matrices on): `None` when both
/// answer right, else what went wrong.
pub(crate) async fn cooperative_matrices(backend: &dyn Backend) -> Option<String> {
    let cases = [
        ("mul_mat_coop", product_case(), 0.0),
        ("flash_attn_coop", attention_case(), ATTN_MAX_ERR),
    ];
    for (kernel, case, tolerance) in cases {
        let outcome = match case {
            Ok(c) => run(backend, &c).await.map(|got| max_err(&got, &c.want)),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(err) if err <= tolerance => {}
            Ok(err) => {
                return Some(format!(
                    "{kernel} answered a check case {err:.3e} off (allowed {tolerance:.0e})"
                ))
            }
            Err(e) => return Some(format!("{kernel} failed its check case: {e}")),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Kernel;
    use crate::ops::{plan_graph, test_caps};

    #[test]
    fn the_check_cases_plan_the_coop_kernels() {
        let caps = test_caps(true, 32, 49152);
        let kernels = |g: &Graph| -> Vec<Kernel> {
            plan_graph(g, &caps)
                .unwrap()
                .dispatches
                .iter()
                .map(|d| d.key.kernel)
                .collect()
        };
        assert!(matches!(
            kernels(&product_case().unwrap().graph)[..],
            [Kernel::MulMatCoop {
                bias: true,
                res: true,
                ..
            }]
        ));
        assert!(kernels(&attention_case().unwrap().graph)
            .iter()
            .any(|k| matches!(k, Kernel::FlashAttnCoop { .. })));
    }

    #[test]
    fn the_check_answers_match_the_reference_backend() {
        let cpu = wgllm_cpu::CpuBackend;
        for c in [product_case().unwrap(), attention_case().unwrap()] {
            let got = pollster::block_on(run(&cpu, &c)).unwrap();
            assert!(max_err(&got, &c.want) < 1e-5, "{}", max_err(&got, &c.want));
        }
    }

    /// The check's graphs run on any device and pass with whatever kernels it plans (the tiled
    /// ones on lavapipe; on a device with cooperative matrices the open already ran it).
    #[test]
    fn the_check_passes_on_the_device() {
        let gpu = crate::WebGpuBackend::new(crate::WebGpuConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pollster::block_on(cooperative_matrices(&gpu)), None);
    }

    #[test]
    fn max_err_flags_non_finite_values_and_lengths() {
        assert_eq!(max_err(&[1.0, 2.5], &[1.0, 2.0]), 0.5);
        assert_eq!(max_err(&[f32::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(max_err(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }
}
