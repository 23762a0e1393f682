//! set, concat, repeat, pad, diag, tri, upscale and add_id: hand-checked tiny tensors, builder
//! errors, and the bilinear/bicubic numpy fixtures of `scripts/gen_cpu_fixtures_nn.py`.

pub mod common;
#[path = "fixtures/load.rs"]
pub mod load;

use common::*;
use wgllm_core::op::{ScaleMode, TriKind};
use wgllm_core::{Backend, DType, Error, Graph, TensorId};

/// Runs a one-output graph.
fn run1(g: &mut Graph, inputs: &[(TensorId, Vec<u8>)], out: TensorId) -> Vec<f32> {
    run(g, inputs, &[out]).remove(0)
}

#[test]
fn set_writes_b_into_a_strided_view_of_a_copy() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 3, 1, 1]).unwrap();
    let b = g.input("b", DType::F32, [2, 2, 1, 1]).unwrap();
    // Rows of 16 bytes; start at element (1, 1) = byte 20.
    let s = g.set(a, b, [16, 48, 48], 20).unwrap();
    let av: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let out = run(
        &mut g,
        &[
            (a, f32_bytes(&av)),
            (b, f32_bytes(&[100., 101., 102., 103.])),
        ],
        &[s, a],
    );
    let want = [0., 1., 2., 3., 4., 100., 101., 7., 8., 102., 103., 11.];
    assert_eq!(out[0], want);
    assert_eq!(out[1], av, "a itself is unchanged");
}

#[test]
fn set_and_concat_keep_i32_exact() {
    let big = (1 << 24) + 1;
    let mut g = Graph::new();
    let a = g.input("a", DType::I32, [3, 1, 1, 1]).unwrap();
    let b = g.input("b", DType::I32, [1, 1, 1, 1]).unwrap();
    let s = g.set(a, b, [12, 12, 12], 4).unwrap();
    let c = g.concat(a, b, 0).unwrap();
    g.mark_output(s).unwrap();
    g.mark_output(c).unwrap();
    let mut exe = wgllm_cpu::CpuBackend.compile(&g).unwrap();
    let (ab, bb) = (i32_bytes(&[big, -big, 7]), i32_bytes(&[big + 2]));
    exe.run(&[(a, &ab), (b, &bb)]).unwrap();
    assert_eq!(exe.read(s).unwrap(), i32_bytes(&[big, big + 2, 7]));
    assert_eq!(exe.read(c).unwrap(), i32_bytes(&[big, -big, 7, big + 2]));
}

#[test]
fn concat_along_dims_0_and_1() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 2, 1, 1]).unwrap();
    let b0 = g.input("b0", DType::F32, [1, 2, 1, 1]).unwrap();
    let b1 = g.input("b1", DType::F16, [2, 1, 1, 1]).unwrap();
    let c0 = g.concat(a, b0, 0).unwrap();
    let a16 = g.cont(a, DType::F16).unwrap();
    let c1 = g.concat(a16, b1, 1).unwrap();
    let b1v: Vec<u8> = [7f32, 8.]
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let out = run(
        &mut g,
        &[
            (a, f32_bytes(&[1., 2., 3., 4.])),
            (b0, f32_bytes(&[5., 6.])),
            (b1, b1v),
        ],
        &[c0, c1],
    );
    assert_eq!(out[0], [1., 2., 5., 3., 4., 6.]);
    assert_eq!(out[1], [1., 2., 3., 4., 7., 8.]);
}

#[test]
fn repeat_tiles_every_dim() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 1, 1, 1]).unwrap();
    let r = g.repeat(a, [4, 2, 1, 1]).unwrap();
    let out = run1(&mut g, &[(a, f32_bytes(&[1., 2.]))], r);
    assert_eq!(out, [1., 2., 1., 2., 1., 2., 1., 2.]);
}

#[test]
fn pad_with_zeros_and_circular() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 2, 1, 1]).unwrap();
    let z = g.pad(a, [1, 0, 0, 0], [0, 1, 0, 0], false).unwrap();
    let v = g.input("v", DType::F32, [3, 1, 1, 1]).unwrap();
    let c = g.pad(v, [1, 0, 0, 0], [2, 0, 0, 0], true).unwrap();
    let out = run(
        &mut g,
        &[
            (a, f32_bytes(&[1., 2., 3., 4.])),
            (v, f32_bytes(&[1., 2., 3.])),
        ],
        &[z, c],
    );
    assert_eq!(out[0], [0., 1., 2., 0., 3., 4., 0., 0., 0.]);
    // The left pad wraps to the last value, the right pad to the first ones.
    assert_eq!(out[1], [3., 1., 2., 3., 1., 2.]);
}

#[test]
fn diag_and_every_triangle() {
    let mut g = Graph::new();
    let v = g.input("v", DType::F32, [3, 1, 1, 1]).unwrap();
    let d = g.diag(v).unwrap();
    let m = g.input("m", DType::F32, [3, 3, 1, 1]).unwrap();
    let kinds = [
        TriKind::Lower,
        TriKind::LowerDiag,
        TriKind::Upper,
        TriKind::UpperDiag,
    ];
    let tris: Vec<TensorId> = kinds.iter().map(|&k| g.tri(m, k).unwrap()).collect();
    let mv: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let mut outs = vec![d];
    outs.extend(&tris);
    let out = run(
        &mut g,
        &[(v, f32_bytes(&[1., 2., 3.])), (m, f32_bytes(&mv))],
        &outs,
    );
    assert_eq!(out[0], [1., 0., 0., 0., 2., 0., 0., 0., 3.]);
    // Element (column i0, row i1) sits at i1·3 + i0.
    assert_eq!(out[1], [0., 0., 0., 4., 0., 0., 7., 8., 0.]);
    assert_eq!(out[2], [1., 0., 0., 4., 5., 0., 7., 8., 9.]);
    assert_eq!(out[3], [0., 2., 3., 0., 0., 6., 0., 0., 0.]);
    assert_eq!(out[4], [1., 2., 3., 0., 5., 6., 0., 0., 9.]);
}

#[test]
fn upscale_a_2x2_nearest_and_bilinear() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 2, 1, 1]).unwrap();
    let near = g.upscale(a, [4, 4, 1, 1], ScaleMode::Nearest).unwrap();
    let bil = g
        .upscale(
            a,
            [4, 4, 1, 1],
            ScaleMode::Bilinear {
                align_corners: false,
            },
        )
        .unwrap();
    let aligned = g
        .upscale(
            a,
            [3, 3, 1, 1],
            ScaleMode::Bilinear {
                align_corners: true,
            },
        )
        .unwrap();
    let out = run(
        &mut g,
        &[(a, f32_bytes(&[1., 2., 3., 4.]))],
        &[near, bil, aligned],
    );
    #[rustfmt::skip]
    let nearest = [
        1., 1., 2., 2.,
        1., 1., 2., 2.,
        3., 3., 4., 4.,
        3., 3., 4., 4.,
    ];
    assert_eq!(out[0], nearest);
    // Half-pixel centres: samples at -0.25, 0.25, 0.75, 1.25, clamped to the edges.
    #[rustfmt::skip]
    let bilinear = [
        1.0, 1.25, 1.75, 2.0,
        1.5, 1.75, 2.25, 2.5,
        2.5, 2.75, 3.25, 3.5,
        3.0, 3.25, 3.75, 4.0,
    ];
    assert_close(&out[1], &bilinear, 1e-6);
    // Aligned corners: samples at 0, 0.5, 1.
    assert_close(&out[2], &[1., 1.5, 2., 2., 2.5, 3., 3., 3.5, 4.], 1e-6);
}

#[test]
fn add_id_adds_the_selected_rows() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 2, 1, 1]).unwrap();
    let b = g.input("b", DType::F32, [2, 3, 1, 1]).unwrap();
    let ids = g.input("ids", DType::I32, [2, 1, 1, 1]).unwrap();
    let r = g.add_id(a, b, ids).unwrap();
    let (av, bv) = (
        f32_bytes(&[1., 2., 3., 4.]),
        f32_bytes(&[10., 20., 30., 40., 50., 60.]),
    );
    let out = run1(
        &mut g,
        &[(a, av.clone()), (b, bv.clone()), (ids, i32_bytes(&[2, 0]))],
        r,
    );
    assert_eq!(out, [51., 62., 13., 24.]);
    let mut exe = wgllm_cpu::CpuBackend.compile(&g).unwrap();
    let bad = i32_bytes(&[3, 0]);
    let e = exe.run(&[(a, &av), (b, &bv), (ids, &bad)]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn builders_reject_bad_shapes_and_dtypes() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 3, 1, 1]).unwrap();
    let b = g.input("b", DType::F32, [2, 2, 1, 1]).unwrap();
    let i = g.input("i", DType::I32, [4, 3, 1, 1]).unwrap();
    let q = g.input("q", DType::Q8_0, [32, 1, 1, 1]).unwrap();
    let shape = |r: wgllm_core::Result<TensorId>| matches!(r, Err(Error::Shape { .. }));
    let dtype = |r: wgllm_core::Result<TensorId>| matches!(r, Err(Error::DType { .. }));
    assert!(shape(g.set(a, b, [16, 48, 48], 2)), "misaligned offset");
    assert!(shape(g.set(a, b, [16, 48, 48], 40)), "view past the end");
    assert!(dtype(g.set(a, i, [16, 48, 48], 0)));
    assert!(shape(g.concat(a, b, 0)));
    assert!(dtype(g.concat(a, i, 1)));
    assert!(shape(g.repeat(a, [6, 3, 1, 1])));
    assert!(dtype(g.repeat(q, [32, 2, 1, 1])));
    assert!(shape(g.pad(b, [3, 0, 0, 0], [0; 4], true)));
    assert!(dtype(g.pad(i, [1, 0, 0, 0], [0; 4], false)));
    assert!(shape(g.diag(a)));
    assert!(shape(g.tri(a, TriKind::Upper)));
    assert!(shape(g.upscale(a, [8, 0, 1, 1], ScaleMode::Nearest)));
    let ids = g.input("ids", DType::I32, [3, 1, 1, 1]).unwrap();
    let fids = g.input("fids", DType::F32, [3, 1, 1, 1]).unwrap();
    let table = g.input("t", DType::F32, [4, 5, 1, 1]).unwrap();
    assert!(g.add_id(a, table, ids).is_ok());
    assert!(dtype(g.add_id(a, table, fids)));
    assert!(shape(g.add_id(a, b, ids)));
}

#[test]
fn fixtures_upscale_bilinear_and_bicubic() {
    for name in [
        "upscale_bilinear",
        "upscale_bilinear_align",
        "upscale_bicubic",
        "upscale_bicubic_align",
        "upscale_bilinear_down",
    ] {
        let fx = load::load("nn", name);
        let align_corners = fx.bool("align_corners");
        let mode = match fx.str("mode") {
            "Bilinear" => ScaleMode::Bilinear { align_corners },
            "Bicubic" => ScaleMode::Bicubic { align_corners },
            other => panic!("{name}: unknown mode {other}"),
        };
        let ne = fx.u32s::<4>("ne").map(u64::from);
        let mut g = Graph::new();
        let (a, ab) = fx.feed(&mut g, "a", DType::F32);
        let r = g.upscale(a, ne, mode).unwrap();
        assert_eq!(g.ne(r), fx.expected.ne, "{name}: extents");
        // Bicubic sums 16 weighted taps in f32 (worst seen 1.2e-6).
        fx.check(&run1(&mut g, &[(a, ab)], r), 5e-6);
    }
}
