//! Hand-checked reductions and sorting: sum, sum_rows, cumsum, argmax, argsort, top_k.

pub mod common;
use common::*;
use wgllm_core::op::SortOrder;
use wgllm_core::{DType, Error, Graph};

#[test]
fn sums_and_prefix_sums() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 2, 1, 1]).unwrap();
    let s = g.sum(a).unwrap();
    let r = g.sum_rows(a).unwrap();
    let c = g.cumsum(a).unwrap();
    assert_eq!(g.ne(r), [1, 2, 1, 1]);
    let out = run(
        &mut g,
        &[(a, f32_bytes(&[1., 2., 3., 4., 10., 20., 30., 40.]))],
        &[s, r, c],
    );
    assert_eq!(out[0], vec![110.]);
    assert_eq!(out[1], vec![10., 100.]);
    assert_eq!(out[2], vec![1., 3., 6., 10., 10., 30., 60., 100.]);
}

#[test]
fn sums_keep_the_dtype_and_read_views() {
    // sum_rows of the transpose sums columns; an f16 source gives an f16 result.
    let mut g = Graph::new();
    let a = g.input("a", DType::F16, [3, 2, 1, 1]).unwrap();
    let t = g.transpose(a).unwrap();
    let r = g.sum_rows(t).unwrap();
    assert_eq!((g.ne(r), g.dtype(r)), ([1, 3, 1, 1], DType::F16));
    let bytes: Vec<u8> = [1f32, 2., 3., 4., 5., 6.]
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    let out = run(&mut g, &[(a, bytes)], &[r]);
    assert_eq!(out[0], vec![5., 7., 9.]);
}

#[test]
fn argmax_takes_the_first_of_equal_maxima() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 3, 1, 1]).unwrap();
    let m = g.argmax(a).unwrap();
    assert_eq!((g.ne(m), g.dtype(m)), ([3, 1, 1, 1], DType::I32));
    #[rustfmt::skip]
    let data = [
        1., 3., 3., 2.,
        -1., -1., -1., -1.,
        0., 0., 0., 5.,
    ];
    let out = run(&mut g, &[(a, f32_bytes(&data))], &[m]);
    assert_eq!(out[0], vec![1., 0., 3.]);
}

#[test]
fn argsort_is_stable_in_both_directions() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [5, 2, 1, 1]).unwrap();
    let asc = g.argsort(a, SortOrder::Asc).unwrap();
    let desc = g.argsort(a, SortOrder::Desc).unwrap();
    let data = [2., 1., 2., 1., 3., -0.5, 7., -0.5, 7., 0.];
    let out = run(&mut g, &[(a, f32_bytes(&data))], &[asc, desc]);
    assert_eq!(out[0], vec![1., 3., 0., 2., 4., 0., 2., 4., 1., 3.]);
    assert_eq!(out[1], vec![4., 0., 2., 1., 3., 1., 3., 4., 0., 2.]);
}

#[test]
fn top_k_is_largest_first_with_lower_index_on_ties() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [5, 2, 1, 1]).unwrap();
    let t = g.top_k(a, 3).unwrap();
    assert_eq!(g.ne(t), [3, 2, 1, 1]);
    let data = [0.5, 3., -1., 3., 2., 1., 1., 1., 1., 1.];
    let out = run(&mut g, &[(a, f32_bytes(&data))], &[t]);
    assert_eq!(out[0], vec![1., 3., 4., 0., 1., 2.]);
}

#[test]
fn reduction_builders_reject_bad_inputs() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [5, 2, 2, 1]).unwrap();
    let e = g.top_k(a, 6).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    assert!(g.argmax(a).is_err(), "argmax needs a matrix");
    let i = g.input("i", DType::I32, [5, 2, 1, 1]).unwrap();
    assert!(matches!(g.sum(i), Err(Error::DType { .. })));
    assert!(matches!(g.cumsum(i), Err(Error::DType { .. })));
}
