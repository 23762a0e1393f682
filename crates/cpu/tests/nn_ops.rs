//! Norms, soft_max, rope and glu: hand-checked small cases, builder errors, and the numpy
//! fixtures of `scripts/gen_cpu_fixtures_nn.py`.

pub mod common;
#[path = "fixtures/load.rs"]
pub mod load;

use common::*;
use wgllm_core::op::{GluOp, RopeMode, RopeParams};
use wgllm_core::{DType, Error, Graph, TensorId};

/// Runs a one-output graph.
fn run1(g: &mut Graph, inputs: &[(TensorId, Vec<u8>)], out: TensorId) -> Vec<f32> {
    run(g, inputs, &[out]).remove(0)
}

fn rope_params(mode: RopeMode, n_dims: u32) -> RopeParams {
    RopeParams::new(mode, n_dims)
}

// ---- hand-checked cases ----

#[test]
fn norms_of_four_values() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 1, 1, 1]).unwrap();
    let rms = g.rms_norm(a, 0.0).unwrap();
    let ln = g.norm(a, 0.0).unwrap();
    let out = run(&mut g, &[(a, f32_bytes(&[1., 2., 3., 4.]))], &[rms, ln]);
    // mean(x²) = 30/4.
    let r = 7.5f32.sqrt();
    assert_close(&out[0], &[1. / r, 2. / r, 3. / r, 4. / r], 1e-6);
    // mean 2.5, variance 1.25.
    let s = 1.25f32.sqrt();
    assert_close(&out[1], &[-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s], 1e-6);
}

#[test]
fn l2_norm_divides_by_eps_below_it() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 3, 1, 1]).unwrap();
    let l2 = g.l2_norm(a, 1e-6).unwrap();
    let x = [3., 4., 0., 0., 3e-7, 4e-7];
    let out = run1(&mut g, &[(a, f32_bytes(&x))], l2);
    // ‖(3, 4)‖ = 5; the zero row stays zero (no NaN); ‖(3e-7, 4e-7)‖ = 5e-7 < eps.
    assert_close(&out, &[0.6, 0.8, 0., 0., 0.3, 0.4], 1e-6);
}

#[test]
fn soft_max_with_a_masked_entry_and_scale() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [3, 1, 1, 1]).unwrap();
    let m = g.input("m", DType::F32, [3, 1, 1, 1]).unwrap();
    let s = g.soft_max(a, Some(m), None, 0.5, 0.0).unwrap();
    let out = run1(
        &mut g,
        &[
            (a, f32_bytes(&[2., 4., 6.])),
            (m, f32_bytes(&[0., f32::NEG_INFINITY, 0.])),
        ],
        s,
    );
    // Logits 1, -inf, 3.
    let e = (-2f32).exp();
    assert_close(&out, &[e / (1. + e), 0., 1. / (1. + e)], 1e-6);
}

#[test]
fn soft_max_sink_joins_the_denominator_only() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 1, 2, 1]).unwrap();
    let sinks = g.input("s", DType::F32, [2, 1, 1, 1]).unwrap();
    let s = g.soft_max(a, None, Some(sinks), 1.0, 0.0).unwrap();
    // Head 0: logits 0, 0 and sink ln 2 -> e^0 / (1 + 1 + 2). Head 1: sink -inf is no sink.
    let out = run1(
        &mut g,
        &[
            (a, f32_bytes(&[0., 0., 0., 0.])),
            (sinks, f32_bytes(&[2f32.ln(), f32::NEG_INFINITY])),
        ],
        s,
    );
    assert_close(&out, &[0.25, 0.25, 0.5, 0.5], 1e-6);
}

#[test]
fn soft_max_alibi_slopes_scale_the_mask_per_head() {
    // n_head 2, max_bias 2: n_head_log2 = 2, m0 = 2^-1, slopes 1/2 and 1/4.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 1, 2, 1]).unwrap();
    let m = g.input("m", DType::F16, [2, 1, 1, 1]).unwrap();
    let s = g.soft_max(a, Some(m), None, 1.0, 2.0).unwrap();
    let mask: Vec<u8> = [0f32, 4. * 2f32.ln()]
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let out = run1(&mut g, &[(a, f32_bytes(&[0.; 4])), (m, mask)], s);
    let m1 = half::f16::from_f32(4. * 2f32.ln()).to_f32();
    let (p0, p1) = ((0.5 * m1).exp(), (0.25 * m1).exp());
    // ≈ [0.2, 0.8] and [1/3, 2/3].
    assert_close(
        &out,
        &[
            1. / (1. + p0),
            p0 / (1. + p0),
            1. / (1. + p1),
            p1 / (1. + p1),
        ],
        1e-6,
    );
    assert!((out[1] - 0.8).abs() < 1e-3 && (out[3] - 2. / 3.).abs() < 1e-3);
}

#[test]
fn rope_neox_and_normal_two_tokens() {
    // head_dim 4 fully rotated, one head, positions 0 and 1; theta_scale = 10000^(-2/4) = 0.01.
    let x = [1f32, 2., 3., 4., 1., 2., 3., 4.];
    let (c0, s0) = (1f32.cos(), 1f32.sin());
    let (c1, s1) = (0.01f32.cos(), 0.01f32.sin());
    for mode in [RopeMode::Neox, RopeMode::Normal] {
        let mut g = Graph::new();
        let xt = g.input("x", DType::F32, [4, 1, 2, 1]).unwrap();
        let pos = g.input("pos", DType::I32, [2, 1, 1, 1]).unwrap();
        let r = g.rope(xt, pos, None, rope_params(mode, 4)).unwrap();
        let out = run1(&mut g, &[(xt, f32_bytes(&x)), (pos, i32_bytes(&[0, 1]))], r);
        let token1 = match mode {
            // Pairs (0, 2) at angle 1 and (1, 3) at angle 0.01.
            RopeMode::Neox => [
                c0 - 3. * s0,
                2. * c1 - 4. * s1,
                s0 + 3. * c0,
                2. * s1 + 4. * c1,
            ],
            // Pairs (0, 1) at angle 1 and (2, 3) at angle 0.01.
            _ => [
                c0 - 2. * s0,
                s0 + 2. * c0,
                3. * c1 - 4. * s1,
                3. * s1 + 4. * c1,
            ],
        };
        assert_close(&out[..4], &x[..4], 1e-6);
        assert_close(&out[4..], &token1, 1e-6);
    }
}

#[test]
fn rope_passes_unrotated_dims_through_and_reads_f16() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F16, [6, 2, 1, 1]).unwrap();
    let pos = g.input("pos", DType::I32, [1, 1, 1, 1]).unwrap();
    let r = g
        .rope(x, pos, None, rope_params(RopeMode::Normal, 2))
        .unwrap();
    assert_eq!(g.dtype(r), DType::F16);
    let xv = [0.5f32, -1., 2., 3., 4., 5., 1., 0., -2., -3., -4., -5.];
    let xb: Vec<u8> = xv
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let out = run1(&mut g, &[(x, xb), (pos, i32_bytes(&[3]))], r);
    let (c, s) = (3f32.cos(), 3f32.sin());
    let want = [
        0.5 * c + s,
        0.5 * s - c,
        2.,
        3.,
        4.,
        5.,
        c,
        s,
        -2.,
        -3.,
        -4.,
        -5.,
    ];
    assert_close(&out, &want, 1e-3);
}

#[test]
fn glu_halves_swapped_and_split() {
    let silu = |x: f32| x / (1. + (-x).exp());
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 1, 1, 1]).unwrap();
    let sw = g.glu(a, GluOp::Swiglu, false).unwrap();
    let swr = g.glu(a, GluOp::Swiglu, true).unwrap();
    let re = g.glu(a, GluOp::Reglu, false).unwrap();
    let b = g.input("b", DType::F32, [4, 1, 1, 1]).unwrap();
    let split = g.glu_split(a, b, GluOp::Reglu).unwrap();
    let oai = g
        .glu_split(
            a,
            b,
            GluOp::SwigluOai {
                alpha: 1.0,
                limit: 1.5,
            },
        )
        .unwrap();
    let out = run(
        &mut g,
        &[
            (a, f32_bytes(&[1., -1., 2., 3.])),
            (b, f32_bytes(&[5., 6., 7., -8.])),
        ],
        &[sw, swr, re, split, oai],
    );
    assert_close(&out[0], &[silu(1.) * 2., silu(-1.) * 3.], 1e-6);
    // Swapped: x = (2, 3) gated, g = (1, -1).
    assert_close(&out[1], &[silu(2.), -silu(3.)], 1e-6);
    assert_close(&out[2], &[2., 0.], 1e-6);
    assert_close(&out[3], &[5., 0., 14., -24.], 1e-6);
    // x clipped to <= 1.5, g clamped to [-1.5, 1.5]: (x·σ(x))·(g + 1).
    let want: Vec<f32> = [(1f32, 1.5f32), (-1., 1.5), (1.5, 1.5), (1.5, -1.5)]
        .iter()
        .map(|&(x, g)| silu(x) * (g + 1.))
        .collect();
    assert_close(&out[4], &want, 1e-6);
}

#[test]
fn builders_reject_bad_shapes_and_dtypes() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [8, 4, 2, 1]).unwrap();
    let h = g.input("h", DType::F16, [8, 4, 2, 1]).unwrap();
    let pos_f = g.input("pf", DType::F32, [2, 1, 1, 1]).unwrap();
    let pos = g.input("p", DType::I32, [2, 1, 1, 1]).unwrap();
    let p3 = g.input("p3", DType::I32, [3, 1, 1, 1]).unwrap();
    let wide = g.input("wide", DType::F32, [9, 4, 1, 1]).unwrap();
    let sinks3 = g.input("s3", DType::F32, [3, 1, 1, 1]).unwrap();
    assert!(matches!(g.rms_norm(h, 1e-6), Err(Error::DType { .. })));
    assert!(matches!(g.norm(a, -1.0), Err(Error::Shape { .. })));
    assert!(matches!(
        g.soft_max(a, Some(wide), None, 1.0, 0.0),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        g.soft_max(a, None, Some(sinks3), 1.0, 0.0),
        Err(Error::Shape { .. })
    ));
    let p = rope_params(RopeMode::Neox, 8);
    assert!(matches!(
        g.rope(a, pos_f, None, p),
        Err(Error::DType { .. })
    ));
    assert!(matches!(g.rope(a, p3, None, p), Err(Error::Shape { .. })));
    assert!(g.rope(a, pos, None, p).is_ok());
    assert!(matches!(
        g.glu(wide, GluOp::Geglu, false),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        g.glu_split(a, h, GluOp::Geglu),
        Err(Error::DType { .. })
    ));
}

// ---- numpy fixtures ----

#[test]
fn fixtures_norms() {
    for name in ["rms_norm", "norm", "l2_norm"] {
        let fx = load::load("nn", name);
        let mut g = Graph::new();
        let (a, ab) = fx.feed(&mut g, "a", DType::F32);
        let eps = fx.f32("eps");
        let r = match name {
            "rms_norm" => g.rms_norm(a, eps),
            "norm" => g.norm(a, eps),
            _ => g.l2_norm(a, eps),
        }
        .unwrap();
        fx.check(&run1(&mut g, &[(a, ab)], r), 1e-6);
    }
}

#[test]
fn fixtures_soft_max() {
    for (name, mask_dtype) in [
        ("soft_max_alibi_sinks", DType::F16),
        ("soft_max_mask_f32", DType::F32),
    ] {
        let fx = load::load("nn", name);
        let mut g = Graph::new();
        let (a, ab) = fx.feed(&mut g, "a", DType::F32);
        let (m, mb) = fx.feed(&mut g, "mask", mask_dtype);
        let mut inputs = vec![(a, ab), (m, mb)];
        let sinks = fx.has("sinks").then(|| {
            let (s, sb) = fx.feed(&mut g, "sinks", DType::F32);
            inputs.push((s, sb));
            s
        });
        let r = g
            .soft_max(a, Some(m), sinks, fx.f32("scale"), fx.f32("max_bias"))
            .unwrap();
        fx.check(&run1(&mut g, &inputs, r), 1e-6);
    }
}

#[test]
fn fixtures_rope_every_mode_with_yarn_and_freq_factors() {
    for name in [
        "rope_normal_yarn",
        "rope_neox_yarn",
        "rope_mrope_yarn",
        "rope_imrope_yarn",
        "rope_vision_yarn",
        "rope_neox_plain",
    ] {
        let fx = load::load("nn", name);
        let mode = match fx.str("mode") {
            "Normal" => RopeMode::Normal,
            "Neox" => RopeMode::Neox,
            "MultiSection" => RopeMode::MultiSection,
            "InterleavedMultiSection" => RopeMode::InterleavedMultiSection,
            "Vision" => RopeMode::Vision,
            other => panic!("{name}: unknown mode {other}"),
        };
        let p = RopeParams {
            mode,
            n_dims: fx.f32("n_dims") as u32,
            sections: fx.u32s("sections"),
            n_ctx_orig: fx.f32("n_ctx_orig") as u32,
            freq_base: fx.f32("freq_base"),
            freq_scale: fx.f32("freq_scale"),
            ext_factor: fx.f32("ext_factor"),
            attn_factor: fx.f32("attn_factor"),
            beta_fast: fx.f32("beta_fast"),
            beta_slow: fx.f32("beta_slow"),
        };
        let mut g = Graph::new();
        let (x, xb) = fx.feed(&mut g, "x", DType::F32);
        let (pos, pb) = fx.feed(&mut g, "pos", DType::I32);
        let mut inputs = vec![(x, xb), (pos, pb)];
        let ff = fx.has("freq_factors").then(|| {
            let (f, fb) = fx.feed(&mut g, "freq_factors", DType::F32);
            inputs.push((f, fb));
            f
        });
        let r = g.rope(x, pos, ff, p).unwrap();
        // ggml's f32 running product of theta_scale vs numpy's direct power in f64.
        fx.check(&run1(&mut g, &inputs, r), 2e-6);
    }
}

#[test]
fn fixtures_glu_variants() {
    for name in [
        "glu_reglu",
        "glu_geglu",
        "glu_swiglu",
        "glu_swigluoai",
        "glu_gegluerf",
        "glu_gegluquick",
        "glu_split_swiglu",
        "glu_split_swigluoai",
    ] {
        let fx = load::load("nn", name);
        let op = match fx.str("op") {
            "Reglu" => GluOp::Reglu,
            "Geglu" => GluOp::Geglu,
            "Swiglu" => GluOp::Swiglu,
            "SwigluOai" => GluOp::SwigluOai {
                alpha: fx.f32("alpha"),
                limit: fx.f32("limit"),
            },
            "GegluErf" => GluOp::GegluErf,
            "GegluQuick" => GluOp::GegluQuick,
            other => panic!("{name}: unknown op {other}"),
        };
        let mut g = Graph::new();
        let (a, ab) = fx.feed(&mut g, "a", DType::F32);
        let mut inputs = vec![(a, ab)];
        let r = if fx.has("b") {
            let (b, bb) = fx.feed(&mut g, "b", DType::F32);
            inputs.push((b, bb));
            g.glu_split(a, b, op).unwrap()
        } else {
            g.glu(a, op, fx.bool("swapped")).unwrap()
        };
        fx.check(&run1(&mut g, &inputs, r), 2e-6);
    }
}
