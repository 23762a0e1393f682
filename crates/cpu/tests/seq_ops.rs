//! Sequence, convolution and triangular-solve ops: hand-checked tiny cases, error cases, and
//! numpy fixtures (`scripts/gen_cpu_fixtures_seq.py`) for ssm_scan, gated_delta_net, conv_2d and
//! im2col with stride/pad/dilation.

pub mod common;
#[path = "fixtures/load.rs"]
pub mod load;

use common::*;
use wgllm_core::{Backend, DType, Graph, TensorId};
use wgllm_cpu::CpuBackend;

/// Adds one f32 input per fixture tensor, in the order given, returning ids and bytes.
fn fixture_inputs(
    g: &mut Graph,
    f: &load::Fixture,
    names: &[&str],
) -> (Vec<TensorId>, Vec<(TensorId, Vec<u8>)>) {
    let mut ids = Vec::new();
    let mut bytes = Vec::new();
    for &n in names {
        let t = f.input(n);
        let id = g.input(n, DType::F32, t.ne).unwrap();
        ids.push(id);
        bytes.push((id, f32_bytes(&t.data)));
    }
    (ids, bytes)
}

#[test]
fn ssm_conv_slides_the_kernel_over_each_channel() {
    // d_conv 3, d_inner 2, 2 new tokens: conv_x holds 2 + 2 positions per channel.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 2, 1, 1]).unwrap();
    let w = g.input("w", DType::F32, [3, 2, 1, 1]).unwrap();
    let r = g.ssm_conv(x, w).unwrap();
    assert_eq!(g.ne(r), [2, 2, 1, 1]);
    let out = run(
        &mut g,
        &[
            (x, f32_bytes(&[1., 2., 3., 4., 0., 1., 0., -1.])),
            (w, f32_bytes(&[1., 10., 100., 0.5, 0.5, 0.5])),
        ],
        &[r],
    );
    // t0: 1 + 20 + 300, 0.5·(0 + 1 + 0); t1: 2 + 30 + 400, 0.5·(1 + 0 - 1).
    assert_eq!(out[0], vec![321., 0.5, 432., 0.]);
}

#[test]
fn ssm_builders_reject_mismatched_extents() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 2, 1, 1]).unwrap();
    let w = g.input("w", DType::F32, [3, 3, 1, 1]).unwrap();
    assert!(g.ssm_conv(x, w).is_err(), "d_inner differs");
    let w6 = g.input("w6", DType::F32, [6, 2, 1, 1]).unwrap();
    assert!(g.ssm_conv(x, w6).is_err(), "kernel longer than the input");
    let v = g.input("v", DType::F32, [4, 2, 3, 1]).unwrap();
    let qk = g.input("qk", DType::F32, [4, 2, 3, 1]).unwrap();
    let gate = g.input("g", DType::F32, [1, 2, 3, 1]).unwrap();
    let beta = g.input("b", DType::F32, [1, 2, 3, 1]).unwrap();
    let st = g.input("s", DType::F32, [4, 4, 2, 1]).unwrap();
    let r = g.gated_delta_net(qk, qk, v, gate, beta, st).unwrap();
    assert_eq!(g.ne(r), [8, 3 + 4, 1, 1]);
    let small = g.input("small", DType::F32, [4, 4, 1, 1]).unwrap();
    assert!(g.gated_delta_net(qk, qk, v, gate, beta, small).is_err());
    assert!(g.gated_delta_net(qk, qk, v, gate, gate, st).is_ok());
    let q3 = g.input("q3", DType::F32, [3, 2, 3, 1]).unwrap();
    assert!(g.gated_delta_net(q3, qk, v, gate, beta, st).is_err());
}

/// A Mamba-2 scan graph with one head, head_dim 1, d_state 2 and states picked by `ids`.
fn tiny_scan(n_rs: u64) -> (Graph, [TensorId; 8]) {
    let mut g = Graph::new();
    let s = g.input("s", DType::F32, [2, 1, 1, n_rs]).unwrap();
    let x = g.input("x", DType::F32, [1, 1, 1, 1]).unwrap();
    let dt = g.input("dt", DType::F32, [1, 1, 1, 1]).unwrap();
    let a = g.input("a", DType::F32, [1, 1, 1, 1]).unwrap();
    let b = g.input("b", DType::F32, [2, 1, 1, 1]).unwrap();
    let c = g.input("c", DType::F32, [2, 1, 1, 1]).unwrap();
    let ids = g.input("ids", DType::I32, [1, 1, 1, 1]).unwrap();
    let r = g.ssm_scan(s, x, dt, a, b, c, ids).unwrap();
    (g, [s, x, dt, a, b, c, ids, r])
}

#[test]
fn ssm_scan_one_step_by_hand_and_bad_state_id() {
    // dt = 30 (softplus(30) = 30), A = -ln(2)/30: decay exactly 1/2. State [4, 8] from slot 1,
    // x = 0.1: state' = state/2 + B·3 = [2 + 3, 4 - 3]; y = state'·C = 5·1 + 1·2.
    let (mut g, [s, x, dt, a, b, c, ids, r]) = tiny_scan(2);
    assert_eq!(g.ne(r), [1 + 2, 1, 1, 1]);
    let inputs = |id: i32| {
        vec![
            (s, f32_bytes(&[0., 0., 4., 8.])),
            (x, f32_bytes(&[0.1])),
            (dt, f32_bytes(&[30.])),
            (a, f32_bytes(&[-std::f32::consts::LN_2 / 30.])),
            (b, f32_bytes(&[1., -1.])),
            (c, f32_bytes(&[1., 2.])),
            (ids, i32_bytes(&[id])),
        ]
    };
    let out = run(&mut g, &inputs(1), &[r]);
    assert_close(&out[0], &[7., 5., 1.], 1e-5);

    let (mut g, [.., r]) = tiny_scan(2);
    g.mark_output(r).unwrap();
    let mut exe = CpuBackend.compile(&g).unwrap();
    let owned = inputs(2);
    let refs: Vec<(TensorId, &[u8])> = owned.iter().map(|(t, v)| (*t, v.as_slice())).collect();
    let e = exe.run(&refs).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn gated_delta_net_one_token_by_hand() {
    // S = 2, one head, zero state, g = 0 (no decay), beta = 1: delta = v, M = k ⊗ v,
    // o = Mᵀq / sqrt(2) = v·(k·q) / sqrt(2); the final state stores M transposed.
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [2, 1, 1, 1]).unwrap();
    let k = g.input("k", DType::F32, [2, 1, 1, 1]).unwrap();
    let v = g.input("v", DType::F32, [2, 1, 1, 1]).unwrap();
    let gate = g.input("g", DType::F32, [1, 1, 1, 1]).unwrap();
    let beta = g.input("beta", DType::F32, [1, 1, 1, 1]).unwrap();
    let st = g.input("s", DType::F32, [2, 2, 1, 1]).unwrap();
    let r = g.gated_delta_net(q, k, v, gate, beta, st).unwrap();
    let out = run(
        &mut g,
        &[
            (q, f32_bytes(&[1., 1.])),
            (k, f32_bytes(&[1., 2.])),
            (v, f32_bytes(&[3., 4.])),
            (gate, f32_bytes(&[0.])),
            (beta, f32_bytes(&[1.])),
            (st, f32_bytes(&[0.; 4])),
        ],
        &[r],
    );
    let h = std::f32::consts::FRAC_1_SQRT_2;
    // M[i][j] = k_i·v_j = [[3, 4], [6, 8]]; stored as m[j·2 + i]: [3, 6, 4, 8].
    assert_close(&out[0], &[9. * h, 12. * h, 3., 6., 4., 8.], 1e-6);
}

/// The 3×3 image 1..9 (row-major, y outer) and a 2×2 kernel [1, 2; 3, 4].
fn tiny_conv(stride: u32, pad: u32) -> Vec<f32> {
    let mut g = Graph::new();
    let k = g.input("k", DType::F32, [2, 2, 1, 1]).unwrap();
    let x = g.input("x", DType::F32, [3, 3, 1, 1]).unwrap();
    let r = g.conv_2d(k, x, [stride; 2], [pad; 2], [1, 1]).unwrap();
    let img: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    run(
        &mut g,
        &[(k, f32_bytes(&[1., 2., 3., 4.])), (x, f32_bytes(&img))],
        &[r],
    )
    .remove(0)
}

#[test]
fn conv_2d_of_a_3x3_image_with_a_2x2_kernel() {
    // r(x, y) = 1·i(x, y) + 2·i(x+1, y) + 3·i(x, y+1) + 4·i(x+1, y+1).
    assert_eq!(tiny_conv(1, 0), vec![37., 47., 67., 77.]);
    // Stride 2, pad 1: the taps that land in the padding read zeros.
    assert_eq!(tiny_conv(2, 1), vec![4., 18., 36., 77.]);
    let mut g = Graph::new();
    let k = g.input("k", DType::F32, [2, 2, 2, 1]).unwrap();
    let x = g.input("x", DType::F32, [3, 3, 1, 1]).unwrap();
    assert!(g.conv_2d(k, x, [1, 1], [0, 0], [1, 1]).is_err(), "channels");
    let k4 = g.input("k4", DType::F32, [4, 4, 1, 1]).unwrap();
    assert!(g.conv_2d(k4, x, [1, 1], [0, 0], [1, 1]).is_err(), "too big");
    assert!(g.conv_2d(k4, x, [1, 1], [1, 1], [1, 1]).is_ok());
}

#[test]
fn im2col_of_a_tiny_image() {
    let mut g = Graph::new();
    let k = g.input("k", DType::F16, [2, 2, 1, 1]).unwrap();
    let x = g.input("x", DType::F32, [3, 3, 1, 1]).unwrap();
    let r = g
        .im2col(k, x, [1, 1], [0, 0], [1, 1], true, DType::F16)
        .unwrap();
    assert_eq!((g.ne(r), g.dtype(r)), ([4, 2, 2, 1], DType::F16));
    let img: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let out = run(&mut g, &[(k, vec![0; 8]), (x, f32_bytes(&img))], &[r]);
    #[rustfmt::skip]
    let want = vec![
        1., 2., 4., 5.,   2., 3., 5., 6.,
        4., 5., 7., 8.,   5., 6., 8., 9.,
    ];
    assert_eq!(out[0], want);
}

/// Solves with `a` (`[2, 2]`, `a[c, r]` order) and `b` of extents `eb`.
fn solve(a: [f32; 4], b: &[f32], eb: [u64; 4], flags: [bool; 3]) -> Result<Vec<f32>, String> {
    let mut g = Graph::new();
    let ai = g.input("a", DType::F32, [2, 2, 1, 1]).unwrap();
    let bi = g.input("b", DType::F32, eb).unwrap();
    let [left, lower, uni] = flags;
    let r = g.solve_tri(ai, bi, left, lower, uni).unwrap();
    g.mark_output(r).unwrap();
    let mut exe = CpuBackend.compile(&g).unwrap();
    let (av, bv) = (f32_bytes(&a), f32_bytes(b));
    exe.run(&[(ai, &av), (bi, &bv)])
        .map_err(|e| e.to_string())?;
    let bytes = exe.read(r).unwrap();
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

#[test]
fn solve_tri_two_by_two() {
    // A = [2 0; 1 4] (the 99 sits in the upper triangle a lower solve must not read).
    let lower = [2., 99., 1., 4.];
    // Left: A·x = [2, 9] -> x = [1, 2]; b is 2 rows of 1 column.
    assert_eq!(
        solve(lower, &[2., 9.], [1, 2, 1, 1], [true, true, false]),
        Ok(vec![1., 2.])
    );
    // Unit diagonal: x0 = 2, x1 = 9 - 1·2.
    assert_eq!(
        solve(lower, &[2., 9.], [1, 2, 1, 1], [true, true, true]),
        Ok(vec![2., 7.])
    );
    // Right: x·A = [4, 8] -> x1 = 2, x0 = (4 - 1·2) / 2.
    assert_eq!(
        solve(lower, &[4., 8.], [2, 1, 1, 1], [false, true, false]),
        Ok(vec![1., 2.])
    );
    // Upper, left: [2 1; 0 4]·x = [4, 8] -> x = [1, 2].
    let upper = [2., 1., 99., 4.];
    assert_eq!(
        solve(upper, &[4., 8.], [1, 2, 1, 1], [true, false, false]),
        Ok(vec![1., 2.])
    );
    // Two right-hand-side columns solved at once: b = [[2, 4], [9, 18]].
    assert_eq!(
        solve(lower, &[2., 4., 9., 18.], [2, 2, 1, 1], [true, true, false]),
        Ok(vec![1., 2., 2., 4.])
    );
    let e = solve(
        [0., 0., 1., 4.],
        &[2., 9.],
        [1, 2, 1, 1],
        [true, true, false],
    )
    .unwrap_err();
    assert!(e.contains("zero on the diagonal"), "{e}");
}

#[test]
fn fixture_ssm_scan_mamba1_and_mamba2() {
    for name in ["ssm_scan_mamba2", "ssm_scan_mamba1"] {
        let f = load::load("seq", name);
        let mut g = Graph::new();
        let (t, mut inputs) = fixture_inputs(&mut g, &f, &["s", "x", "dt", "A", "B", "C"]);
        let idt = f.input("ids");
        let ids = g.input("ids", DType::I32, idt.ne).unwrap();
        let idv: Vec<i32> = idt.data.iter().map(|&x| x as i32).collect();
        inputs.push((ids, i32_bytes(&idv)));
        let r = g.ssm_scan(t[0], t[1], t[2], t[3], t[4], t[5], ids).unwrap();
        assert_eq!(g.ne(r), f.expected.ne);
        let out = run(&mut g, &inputs, &[r]);
        f.check_abs_rel(&out[0], 1e-5, 1e-5);
    }
}

#[test]
fn fixture_gated_delta_net_scalar_gate_and_kda() {
    for name in ["gdn_scalar_gate", "gdn_kda"] {
        let f = load::load("seq", name);
        let mut g = Graph::new();
        let (t, inputs) = fixture_inputs(&mut g, &f, &["q", "k", "v", "g", "beta", "state"]);
        let r = g
            .gated_delta_net(t[0], t[1], t[2], t[3], t[4], t[5])
            .unwrap();
        let out = run(&mut g, &inputs, &[r]);
        f.check_abs_rel(&out[0], 1e-5, 1e-5);
    }
}

#[test]
fn fixture_conv_2d_and_im2col_with_stride_pad_dilation() {
    for name in ["conv_2d", "im2col_2d", "im2col_1d"] {
        let f = load::load("seq", name);
        let mut g = Graph::new();
        let (t, inputs) = fixture_inputs(&mut g, &f, &["kernel", "input"]);
        let (s, p, d) = (f.pair("stride"), f.pair("pad"), f.pair("dilation"));
        let r = if name == "conv_2d" {
            g.conv_2d(t[0], t[1], s, p, d).unwrap()
        } else {
            let is_2d = f.params["is_2d"].as_bool().unwrap();
            g.im2col(t[0], t[1], s, p, d, is_2d, DType::F32).unwrap()
        };
        assert_eq!(g.ne(r), f.expected.ne, "{name}");
        let out = run(&mut g, &inputs, &[r]);
        // im2col only moves values: exact. conv_2d sums 18 products in f32.
        let tol = if name == "conv_2d" { 1e-5 } else { 0.0 };
        f.check_abs_rel(&out[0], tol, tol);
    }
}
