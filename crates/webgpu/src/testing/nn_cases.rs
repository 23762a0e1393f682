//! Op-table cases of the neural-network ops: GLU (fused halves, swapped, split), rms_norm,
//! norm, l2_norm, soft_max (masks, ALiBi, sinks) and RoPE (normal, neox, YaRN, frequency
//! factors, partial rotation; multi-section, interleaved multi-section and vision).

use wgllm_core::op::{GluOp, RopeMode, RopeParams};
use wgllm_core::{DType, Graph, Result, TensorId};

use super::cases::{case, f16_tol, input, F32_MATH};
use super::{Built, Case, Rng};

fn glu_cases(out: &mut Vec<Case>) {
    let ops = [
        GluOp::Reglu,
        GluOp::Geglu,
        GluOp::Swiglu,
        GluOp::SwigluOai {
            alpha: 1.702,
            limit: 7.0,
        },
        GluOp::GegluErf,
        GluOp::GegluQuick,
    ];
    for op in ops {
        let name = op.name();
        for dtype in [DType::F32, DType::F16] {
            let tol = f16_tol(dtype, F32_MATH);
            for swapped in [false, true] {
                let desc = format!("{name} {dtype} halves of [66,3,2] swapped={swapped}");
                out.push(case(name, desc, tol, move |g, rng| {
                    let mut b = Built::default();
                    let a = input(g, rng, &mut b, dtype, [66, 3, 2, 1], -8.0, 8.0)?;
                    let r = g.glu(a, op, swapped)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
            out.push(case(
                name,
                format!("{name} {dtype} split [33,3,2]"),
                tol,
                move |g, rng| {
                    let mut b = Built::default();
                    let a = input(g, rng, &mut b, dtype, [33, 3, 2, 1], -8.0, 8.0)?;
                    let c = input(g, rng, &mut b, dtype, [33, 3, 2, 1], -2.0, 2.0)?;
                    let r = g.glu_split(a, c, op)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
    }
}

fn norm_cases(out: &mut Vec<Case>) {
    type NormFn = fn(&mut Graph, TensorId) -> Result<TensorId>;
    let norms: [(&'static str, NormFn); 3] = [
        ("RMS_NORM", |g, x| g.rms_norm(x, 1e-5)),
        ("NORM", |g, x| g.norm(x, 1e-5)),
        ("L2_NORM", |g, x| g.l2_norm(x, 1e-6)),
    ];
    for (name, f) in norms {
        // Rows of 600 (3 values per lane in registers) and of 4500 (past the 16 values per lane
        // kept: the rest streamed).
        for ne in [
            [33u64, 4, 2, 1],
            [257, 1, 1, 1],
            [1, 3, 1, 1],
            [600, 2, 1, 1],
            [4500, 2, 1, 1],
        ] {
            out.push(case(
                name,
                format!("{name} f32 {ne:?}"),
                F32_MATH,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, DType::F32, ne, -3.0, 3.0)?;
                    let r = f(g, x)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
        out.push(case(
            name,
            format!("{name} f32 transposed [5,7]"),
            F32_MATH,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, DType::F32, [7, 5, 1, 1], -3.0, 3.0)?;
                let xt = g.transpose(x)?;
                let r = f(g, xt)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

/// A mask with about a quarter of its entries -inf, the rest in [-1, 0).
fn mask_input(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    dtype: DType,
    ne: [u64; 4],
) -> Result<TensorId> {
    let t = g.input("mask", dtype, ne)?;
    let n = ne.iter().product::<u64>();
    let vals: Vec<f32> = (0..n)
        .map(|_| {
            if rng.below(4) == 0 {
                f32::NEG_INFINITY
            } else {
                rng.uniform(-1.0, 0.0)
            }
        })
        .collect();
    let bytes = match dtype {
        DType::F16 => vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    b.inputs.push((t, bytes));
    Ok(t)
}

fn soft_max_cases(out: &mut Vec<Case>) {
    // (a extents, mask: dtype and extents, sinks, scale, max_bias)
    type Spec = ([u64; 4], Option<(DType, [u64; 4])>, bool, f32, f32);
    let specs: [Spec; 7] = [
        ([33, 4, 4, 2], None, false, 0.5, 0.0),
        ([1, 3, 1, 1], None, false, 1.0, 0.0),
        (
            [33, 4, 4, 2],
            Some((DType::F32, [33, 6, 2, 1])),
            false,
            0.5,
            0.0,
        ),
        (
            [33, 4, 4, 2],
            Some((DType::F16, [33, 4, 1, 2])),
            false,
            0.125,
            0.0,
        ),
        (
            [17, 3, 6, 1],
            Some((DType::F32, [17, 3, 1, 1])),
            false,
            1.0,
            8.0,
        ),
        ([33, 4, 4, 2], None, true, 0.5, 0.0),
        (
            [257, 2, 4, 1],
            Some((DType::F16, [257, 2, 1, 1])),
            true,
            0.25,
            8.0,
        ),
    ];
    for (ne, mask, sinks, scale, max_bias) in specs {
        let desc = format!(
            "SOFT_MAX f32 {ne:?} mask {mask:?} sinks={sinks} scale={scale} max_bias={max_bias}"
        );
        out.push(case("SOFT_MAX", desc, F32_MATH, move |g, rng| {
            let mut b = Built::default();
            let a = input(g, rng, &mut b, DType::F32, ne, -4.0, 4.0)?;
            let m = match mask {
                Some((dt, mne)) => Some(mask_input(g, rng, &mut b, dt, mne)?),
                None => None,
            };
            let s = match sinks {
                true => Some(input(
                    g,
                    rng,
                    &mut b,
                    DType::F32,
                    [ne[2], 1, 1, 1],
                    -2.0,
                    2.0,
                )?),
                false => None,
            };
            let r = g.soft_max(a, m, s, scale, max_bias)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
}

/// NMSE bound of the f32 RoPE cases. Positions reach 50, so angles reach 50 rad, and GPU sin/cos
/// of such angles differ from the CPU's libm at ~1e-4 relative (SwiftShader, Chromium's CPU
/// WebGPU, gives NMSE 5e-9..1.3e-8); a wrong rotation gives NMSE ~1.
const ROPE_F32_NMSE: f64 = 1e-7;

/// The rope cases' parameters: base 10000, and with `yarn` a 4x context extension.
pub(super) fn rope_params(mode: RopeMode, n_dims: u32, yarn: bool) -> RopeParams {
    RopeParams {
        freq_scale: if yarn { 0.25 } else { 1.0 },
        ext_factor: if yarn { 1.0 } else { 0.0 },
        ..RopeParams::new(mode, n_dims)
    }
}

/// Random frequency factors (one per rotated pair, in [1, 3)) when `on`.
pub(super) fn freq_factors(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    n_dims: u32,
    on: bool,
) -> Result<Option<TensorId>> {
    let ne = [u64::from(n_dims) / 2, 1, 1, 1];
    on.then(|| input(g, rng, b, DType::F32, ne, 1.0, 3.0))
        .transpose()
}

fn rope_cases(out: &mut Vec<Case>) {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for dtype in [DType::F32, DType::F16] {
            // (head_dim, n_dims, YaRN, frequency factors, permuted input)
            let specs = [
                (64u64, 64u32, false, false, false),
                (33, 16, false, false, false),
                (64, 32, true, false, true),
                (64, 64, true, true, false),
            ];
            for (hd, n_dims, yarn, ff, permuted) in specs {
                let desc = format!(
                    "ROPE {mode:?} {dtype} head_dim={hd} n_dims={n_dims} yarn={yarn} ff={ff} permuted={permuted}"
                );
                let tol = f16_tol(dtype, ROPE_F32_NMSE);
                out.push(case("ROPE", desc, tol, move |g, rng| {
                    let mut b = Built::default();
                    let x = if permuted {
                        let x = input(g, rng, &mut b, dtype, [hd, 5, 3, 1], -2.0, 2.0)?;
                        g.permute(x, [0, 2, 1, 3])?
                    } else {
                        input(g, rng, &mut b, dtype, [hd, 3, 5, 1], -2.0, 2.0)?
                    };
                    let pos = input(g, rng, &mut b, DType::I32, [5, 1, 1, 1], 0.0, 50.0)?;
                    let f = freq_factors(g, rng, &mut b, n_dims, ff)?;
                    let r = g.rope(x, pos, f, rope_params(mode, n_dims, yarn))?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
    }
}

/// The multi-section and vision modes: x `[head_dim, 3 heads, 5 tokens, 2 batches]`, four
/// positions per token, model-sized and odd sections (sectors wrap when the sections sum to less
/// than the rotated pairs), each with and without YaRN and frequency factors. Tolerance as the
/// other modes: the same f32 angle recurrence, GPU sin/cos not correctly rounded.
fn rope_multi_cases(out: &mut Vec<Case>) {
    // (mode, head_dim, n_dims, sections)
    let specs = [
        (RopeMode::MultiSection, 128u64, 128u32, [16u32, 24, 24, 0]),
        (RopeMode::MultiSection, 37, 24, [3, 4, 2, 1]),
        (RopeMode::InterleavedMultiSection, 128, 128, [24, 20, 20, 0]),
        (RopeMode::InterleavedMultiSection, 35, 20, [4, 3, 2, 1]),
        (RopeMode::Vision, 64, 32, [16, 16, 0, 0]),
        (RopeMode::Vision, 36, 18, [5, 3, 0, 1]),
    ];
    for (mode, hd, n_dims, sections) in specs {
        for dtype in [DType::F32, DType::F16] {
            for yarn_ff in [false, true] {
                let desc = format!(
                    "ROPE {mode:?} {dtype} head_dim={hd} n_dims={n_dims} sections={sections:?} yarn+ff={yarn_ff} batch=2"
                );
                let tol = f16_tol(dtype, ROPE_F32_NMSE);
                out.push(case("ROPE", desc, tol, move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, dtype, [hd, 3, 5, 2], -2.0, 2.0)?;
                    let pos = input(g, rng, &mut b, DType::I32, [20, 1, 1, 1], 0.0, 50.0)?;
                    let pairs = match mode {
                        RopeMode::Vision => u64::from(n_dims),
                        _ => u64::from(n_dims) / 2,
                    };
                    let f = match yarn_ff {
                        true => Some(input(
                            g,
                            rng,
                            &mut b,
                            DType::F32,
                            [pairs, 1, 1, 1],
                            1.0,
                            3.0,
                        )?),
                        false => None,
                    };
                    let p = RopeParams {
                        sections,
                        ..rope_params(mode, n_dims, yarn_ff)
                    };
                    let r = g.rope(x, pos, f, p)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
    }
}

/// Appends the neural-network cases.
pub(super) fn add(out: &mut Vec<Case>) {
    glu_cases(out);
    norm_cases(out);
    soft_max_cases(out);
    rope_cases(out);
    rope_multi_cases(out);
}
