//! Hand-checked cases for movement, element-wise and mul_mat ops.

pub mod common;
use common::*;
use wgllm_core::op::UnaryOp;
use wgllm_core::{DType, Graph};

#[test]
fn binary_broadcasts_b_over_a() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [3, 2, 1, 1]).unwrap();
    let b = g.input("b", DType::F32, [3, 1, 1, 1]).unwrap();
    let s = g.add(a, b).unwrap();
    let m = g.mul(a, b).unwrap();
    let out = run(
        &mut g,
        &[
            (a, f32_bytes(&[1., 2., 3., 4., 5., 6.])),
            (b, f32_bytes(&[10., 20., 30.])),
        ],
        &[s, m],
    );
    assert_eq!(out[0], vec![11., 22., 33., 14., 25., 36.]);
    assert_eq!(out[1], vec![10., 40., 90., 40., 100., 180.]);
}

#[test]
fn mul_mat_matches_hand_product_and_broadcasts() {
    // a: 2 rows of K=3 (the weight), b: 2 columns of K=3, two batches sharing a.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [3, 2, 1, 1]).unwrap();
    let b = g.input("b", DType::F32, [3, 2, 2, 1]).unwrap();
    let r = g.mul_mat(a, b).unwrap();
    assert_eq!(g.ne(r), [2, 2, 2, 1]);
    let av = [1., 2., 3., 4., 5., 6.];
    let bv = [1., 0., 0., 0., 1., 0., 0., 0., 1., 1., 1., 1.];
    let out = run(&mut g, &[(a, f32_bytes(&av)), (b, f32_bytes(&bv))], &[r]);
    // r[m, n] = a_row_m · b_col_n
    assert_eq!(out[0], vec![1., 4., 2., 5., 3., 6., 6., 15.]);
}

#[test]
fn mul_mat_reads_f16_weights_and_transposed_activations() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F16, [2, 2, 1, 1]).unwrap();
    let bt = g.input("bt", DType::F32, [2, 2, 1, 1]).unwrap();
    let b = g.transpose(bt).unwrap();
    let r = g.mul_mat(a, b).unwrap();
    let a16: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    let out = run(
        &mut g,
        &[(a, a16), (bt, f32_bytes(&[1., 2., 3., 4.]))],
        &[r],
    );
    // b (transposed) columns: [1,3] and [2,4].
    assert_eq!(out[0], vec![7., 15., 10., 22.]);
}

#[test]
fn get_rows_and_set_rows_move_rows() {
    let mut g = Graph::new();
    let table = g.input("t", DType::F32, [2, 3, 1, 1]).unwrap();
    let idx = g.input("i", DType::I32, [2, 1, 1, 1]).unwrap();
    let rows = g.get_rows(table, idx).unwrap();
    let kv = g.state("kv", DType::F16, [2, 4, 1, 1]).unwrap();
    let w = g.set_rows(kv, rows, idx).unwrap();
    let out = run(
        &mut g,
        &[
            (table, f32_bytes(&[1., 2., 3., 4., 5., 6.])),
            (idx, i32_bytes(&[2, 0])),
        ],
        &[rows, w],
    );
    assert_eq!(out[0], vec![5., 6., 1., 2.]);
    assert_eq!(out[1], vec![1., 2., 0., 0., 5., 6., 0., 0.]);
}

#[test]
fn out_of_range_rows_are_errors() {
    let mut g = Graph::new();
    let table = g.input("t", DType::F32, [2, 3, 1, 1]).unwrap();
    let idx = g.input("i", DType::I32, [1, 1, 1, 1]).unwrap();
    let rows = g.get_rows(table, idx).unwrap();
    g.mark_output(rows).unwrap();
    let mut exe = wgllm_core::Backend::compile(&wgllm_cpu::CpuBackend, &g).unwrap();
    let t = f32_bytes(&[0.; 6]);
    let i = i32_bytes(&[3]);
    let e = exe.run(&[(table, &t), (idx, &i)]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn cpy_into_a_transposed_view_and_cont() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 2, 1, 1]).unwrap();
    let s = g.state("s", DType::F32, [2, 2, 1, 1]).unwrap();
    let st = g.transpose(s).unwrap();
    let c = g.cpy(x, st).unwrap();
    let e = g.unary(x, UnaryOp::Exp).unwrap();
    let ct = g.transpose(e).unwrap();
    let cc = g.cont(ct, DType::F16).unwrap();
    let out = run(&mut g, &[(x, f32_bytes(&[0., 1., 2., 3.]))], &[c, s, cc]);
    assert_eq!(out[1], vec![0., 2., 1., 3.]);
    let ex: Vec<f32> = [0f32, 2., 1., 3.]
        .iter()
        .map(|v| half::f16::from_f32(v.exp()).to_f32())
        .collect();
    assert_eq!(out[2], ex);
}

#[test]
fn graphs_compiled_together_share_state_by_name() {
    use wgllm_core::Backend;
    // Graph 1 writes two rows of the cache; graph 2 reads the whole cache.
    let mut g1 = Graph::new();
    let kv = g1.state("kv", DType::F16, [2, 3, 1, 1]).unwrap();
    let x = g1.input("x", DType::F32, [2, 1, 1, 1]).unwrap();
    let i = g1.input("i", DType::I32, [1, 1, 1, 1]).unwrap();
    g1.set_rows(kv, x, i).unwrap();
    let mut g2 = Graph::new();
    let kv2 = g2.state("kv", DType::F16, [2, 3, 1, 1]).unwrap();
    let r = g2.cont(kv2, DType::F32).unwrap();
    g2.mark_output(r).unwrap();
    let mut exes = wgllm_cpu::CpuBackend.compile_shared(&[&g1, &g2]).unwrap();
    let (xb, ib) = (f32_bytes(&[7., 8.]), i32_bytes(&[1]));
    exes[0].run(&[(x, &xb), (i, &ib)]).unwrap();
    exes[1].run(&[]).unwrap();
    let out = exes[1].read(r).unwrap();
    let vals: Vec<f32> = out
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, vec![0., 0., 7., 8., 0., 0.]);

    let mut g3 = Graph::new();
    g3.state("kv", DType::F32, [2, 3, 1, 1]).unwrap();
    let e = wgllm_cpu::CpuBackend
        .compile_shared(&[&g1, &g3])
        .err()
        .unwrap();
    assert!(e.to_string().contains("state 'kv'"), "{e}");
}
