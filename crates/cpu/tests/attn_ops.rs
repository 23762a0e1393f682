//! flash_attn_ext and mul_mat_id: hand-checked tiny cases, error cases, and numpy fixtures
//! (`scripts/gen_cpu_fixtures_seq.py`) for GQA + mask + ALiBi + softcap + sinks with f16 and
//! q8_0/q4_0 K/V read through cache views.

pub mod common;
#[path = "fixtures/load.rs"]
pub mod load;

use common::*;
use wgllm_core::{Backend, DType, Graph, TensorId};
use wgllm_cpu::CpuBackend;

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}

/// One query `[1, 0]` against keys `[1, 0]`, `[0, 1]` with values `[1, 2]`, `[3, 4]` (d = dv = 2,
/// one head); `mask` and `sink` optional. Returns the `[2, 1, 1, 1]` result.
fn one_query(mask: Option<[f32; 2]>, sink: Option<f32>, scale: f32, softcap: f32) -> Vec<f32> {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [2, 1, 1, 1]).unwrap();
    let k = g.input("k", DType::F32, [2, 2, 1, 1]).unwrap();
    let v = g.input("v", DType::F16, [2, 2, 1, 1]).unwrap();
    let mut inputs = vec![
        (q, f32_bytes(&[1., 0.])),
        (k, f32_bytes(&[1., 0., 0., 1.])),
        (v, f16_bytes(&[1., 2., 3., 4.])),
    ];
    let m = mask.map(|mv| {
        let m = g.input("m", DType::F16, [2, 1, 1, 1]).unwrap();
        inputs.push((m, f16_bytes(&mv)));
        m
    });
    let s = sink.map(|sv| {
        let s = g.input("s", DType::F32, [1, 1, 1, 1]).unwrap();
        inputs.push((s, f32_bytes(&[sv])));
        s
    });
    let r = g
        .flash_attn_ext(q, k, v, m, s, scale, 0.0, softcap)
        .unwrap();
    assert_eq!(g.ne(r), [2, 1, 1, 1]);
    run(&mut g, &inputs, &[r]).remove(0)
}

#[test]
fn one_query_two_keys_is_a_softmax_of_the_logits() {
    // Logits 1 and 0: weights e/(e+1) = 0.7310586 and 0.2689414.
    assert_close(
        &one_query(None, None, 1.0, 0.0),
        &[1.537_882_8, 2.537_882_8],
        1e-6,
    );
    // scale 2: weights e²/(e²+1) = 0.8807971.
    assert_close(
        &one_query(None, None, 2.0, 0.0),
        &[1.238_405_8, 2.238_405_8],
        1e-6,
    );
}

#[test]
fn masked_key_is_skipped_and_fully_masked_row_is_zero() {
    let inf = f32::NEG_INFINITY;
    assert_eq!(one_query(Some([0.0, inf]), None, 1.0, 0.0), vec![1.0, 2.0]);
    assert_eq!(one_query(Some([inf, 0.0]), None, 1.0, 0.0), vec![3.0, 4.0]);
    assert_eq!(one_query(Some([inf, inf]), None, 1.0, 0.0), vec![0.0, 0.0]);
    assert_eq!(
        one_query(Some([inf, inf]), Some(0.5), 1.0, 0.0),
        vec![0.0, 0.0]
    );
}

#[test]
fn sink_joins_only_the_denominator() {
    // Weights e, 1 and 1 (the sink): ((e + 3) / (e + 2), (2e + 4) / (e + 2)) = (1 + 1/(e+2), 2).
    assert_close(
        &one_query(None, Some(0.0), 1.0, 0.0),
        &[1.211_941_6, 2.0],
        1e-6,
    );
    // A sink larger than every logit rescales what was accumulated: weights e, 1 and e^3.
    let e = std::f32::consts::E;
    let den = e + 1.0 + e.powi(3);
    let want = [(e + 3.0) / den, (2.0 * e + 4.0) / den];
    assert_close(&one_query(None, Some(3.0), 1.0, 0.0), &want, 1e-6);
}

#[test]
fn softcap_applies_to_scaled_logits_before_the_mask() {
    // s0 = 0.5·tanh(1/0.5) - 1 (mask -1 added after the cap), s1 = 0.
    let s0 = 0.5 * 2f64.tanh() - 1.0;
    let p0 = (1.0 / (1.0 + (-s0).exp())) as f32;
    let want = [p0 + 3.0 * (1.0 - p0), 2.0 * p0 + 4.0 * (1.0 - p0)];
    assert_close(&one_query(Some([-1.0, 0.0]), None, 1.0, 0.5), &want, 1e-6);
    // Capping before the mask (the wrong order) would give s0 = 0.5·tanh(0) = 0: p0 = 0.5.
    assert!((want[0] - 2.0).abs() > 0.1);
}

#[test]
fn gqa_heads_share_kv_and_result_is_permuted() {
    // 4 query heads over 2 kv heads, 2 queries, 2 keys; query i sees only key i. Value of kv head
    // hk, key j is 10·hk + j + 1, so r[0, h, i] = 10·(h / 2) + i + 1.
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [2, 2, 4, 1]).unwrap();
    let k = g.input("k", DType::F32, [2, 2, 2, 1]).unwrap();
    let v = g.input("v", DType::F32, [1, 2, 2, 1]).unwrap();
    let m = g.input("m", DType::F16, [2, 2, 1, 1]).unwrap();
    let r = g
        .flash_attn_ext(q, k, v, Some(m), None, 1.0, 0.0, 0.0)
        .unwrap();
    assert_eq!(g.ne(r), [1, 4, 2, 1]);
    let inf = f32::NEG_INFINITY;
    let out = run(
        &mut g,
        &[
            (q, f32_bytes(&rand_vec(16, 1))),
            (k, f32_bytes(&rand_vec(8, 2))),
            (v, f32_bytes(&[1., 2., 11., 12.])),
            (m, f16_bytes(&[0., inf, inf, 0.])),
        ],
        &[r],
    );
    assert_eq!(out[0], vec![1., 1., 11., 11., 2., 2., 12., 12.]);
}

#[test]
fn alibi_slopes_scale_the_mask_per_head() {
    // 2 heads, max_bias 2: slopes 2^-1 and 2^-2. q = 0, mask [0, -2]: logits [0, -2·slope].
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [2, 1, 2, 1]).unwrap();
    let k = g.input("k", DType::F32, [2, 2, 1, 1]).unwrap();
    let v = g.input("v", DType::F32, [1, 2, 1, 1]).unwrap();
    let m = g.input("m", DType::F32, [2, 1, 1, 1]).unwrap();
    let r = g
        .flash_attn_ext(q, k, v, Some(m), None, 1.0, 2.0, 0.0)
        .unwrap();
    let out = run(
        &mut g,
        &[
            (q, f32_bytes(&[0.; 4])),
            (k, f32_bytes(&[1., 2., 3., 4.])),
            (v, f32_bytes(&[0., 1.])),
            (m, f32_bytes(&[0., -2.])),
        ],
        &[r],
    );
    // Weight of key 1: 1 / (1 + e^(2·slope)).
    assert_close(&out[0], &[0.268_941_42, 0.377_540_67], 1e-6);
}

#[test]
fn flash_attn_builder_rejects_bad_inputs() {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [4, 2, 3, 1]).unwrap();
    let k = g.input("k", DType::F16, [4, 5, 2, 1]).unwrap();
    let v = g.input("v", DType::F16, [4, 5, 3, 1]).unwrap();
    let e = g
        .flash_attn_ext(q, k, v, None, None, 1.0, 0.0, 0.0)
        .unwrap_err();
    assert!(e.to_string().contains("flash_attn_ext"), "{e}");
    let k3 = g.input("k3", DType::F16, [4, 5, 3, 1]).unwrap();
    let q16 = g.input("q16", DType::F16, [4, 2, 3, 1]).unwrap();
    assert!(g
        .flash_attn_ext(q16, k3, v, None, None, 1.0, 0.0, 0.0)
        .is_err());
    let q4 = g.input("q4", DType::Q4_K, [256, 5, 3, 1]).unwrap();
    assert!(g
        .flash_attn_ext(q, q4, v, None, None, 1.0, 0.0, 0.0)
        .is_err());
    let wrong_sinks = g.input("s", DType::F32, [2, 1, 1, 1]).unwrap();
    assert!(g
        .flash_attn_ext(q, k3, v, None, Some(wrong_sinks), 1.0, 0.0, 0.0)
        .is_err());
    assert!(g
        .flash_attn_ext(q, k3, v, None, None, 1.0, 0.0, 0.0)
        .is_ok());
}

/// Data of a `[n0, n1, n2, n3]` tensor reordered as `[n0, n2, n1, n3]`.
fn swap12(data: &[f32], ne: [u64; 4]) -> Vec<f32> {
    let [n0, n1, n2, n3] = ne.map(|x| x as usize);
    let mut out = vec![0f32; data.len()];
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                let src = ((i3 * n2 + i2) * n1 + i1) * n0;
                let dst = ((i3 * n1 + i1) * n2 + i2) * n0;
                out[dst..dst + n0].copy_from_slice(&data[src..src + n0]);
            }
        }
    }
    out
}

#[test]
fn fixture_flash_attn_f16_gqa_alibi_softcap_sinks() {
    let f = load::load("seq", "flash_attn_f16");
    let (q, k, v, m, s) = (
        f.input("q"),
        f.input("k"),
        f.input("v"),
        f.input("mask"),
        f.input("sinks"),
    );
    let mut g = Graph::new();
    let qi = g.input("q", DType::F32, q.ne).unwrap();
    // K arrives as a permuted f16 view: stored [d, n_head_kv, n_kv, batch].
    let [d, nkv, hkv, b] = k.ne;
    let ki = g.input("k", DType::F32, [d, hkv, nkv, b]).unwrap();
    let k16 = g.cont(ki, DType::F16).unwrap();
    let kview = g.permute(k16, [0, 2, 1, 3]).unwrap();
    let vi = g.input("v", DType::F32, v.ne).unwrap();
    let v16 = g.cont(vi, DType::F16).unwrap();
    let mi = g.input("mask", DType::F16, m.ne).unwrap();
    let si = g.input("sinks", DType::F32, s.ne).unwrap();
    let r = g
        .flash_attn_ext(
            qi,
            kview,
            v16,
            Some(mi),
            Some(si),
            f.f32("scale"),
            f.f32("max_bias"),
            f.f32("logit_softcap"),
        )
        .unwrap();
    assert_eq!(g.ne(r), f.expected.ne);
    let out = run(
        &mut g,
        &[
            (qi, f32_bytes(&q.data)),
            (ki, f32_bytes(&swap12(&k.data, k.ne))),
            (vi, f32_bytes(&v.data)),
            (mi, f16_bytes(&m.data)),
            (si, f32_bytes(&s.data)),
        ],
        &[r],
    );
    // Inputs are exact on the f16 grid; only f32 vs f64 accumulation differs.
    f.check_abs_rel(&out[0], 2e-6, 1e-5);
}

#[test]
fn fixture_flash_attn_q8_0_k_view_q4_0_v() {
    let f = load::load("seq", "flash_attn_q8_q4");
    let (q, k, v, m) = (f.input("q"), f.input("k"), f.input("v"), f.input("mask"));
    let [d, nkv, _, _] = k.ne;
    let mut g = Graph::new();
    let qi = g.input("q", DType::F32, q.ne).unwrap();
    // A cache of two slots per position; K is slot 0 of each, a strided q8_0 view.
    let cache = g.input("cache", DType::F32, [d, 2, nkv, 1]).unwrap();
    let cq = g.cont(cache, DType::Q8_0).unwrap();
    let row = DType::Q8_0.row_bytes(d).unwrap();
    let kview = g
        .view(
            cq,
            [d, nkv, 1, 1],
            [34, 2 * row, 2 * row * nkv, 2 * row * nkv],
            0,
        )
        .unwrap();
    let vi = g.input("v", DType::F32, v.ne).unwrap();
    let vq = g.cont(vi, DType::Q4_0).unwrap();
    let mi = g.input("mask", DType::F32, m.ne).unwrap();
    let r = g
        .flash_attn_ext(qi, kview, vq, Some(mi), None, f.f32("scale"), 0.0, 0.0)
        .unwrap();
    let mut cache_data = Vec::new();
    for j in 0..nkv as usize {
        cache_data.extend_from_slice(&k.data[j * d as usize..(j + 1) * d as usize]);
        cache_data.extend(rand_vec(d as usize, j as u64).iter().map(|x| 50.0 * x));
    }
    let out = run(
        &mut g,
        &[
            (qi, f32_bytes(&q.data)),
            (cache, f32_bytes(&cache_data)),
            (vi, f32_bytes(&v.data)),
            (mi, f32_bytes(&m.data)),
        ],
        &[r],
    );
    // K/V are on the q8_0/q4_0 grids, so re-quantizing them is lossless.
    f.check_abs_rel(&out[0], 2e-6, 1e-5);
    // Query 1 has every key masked: all its outputs are exactly zero.
    let row_len = (v.ne[0] * q.ne[2]) as usize;
    assert!(out[0][row_len..2 * row_len].iter().all(|&x| x == 0.0));
}

/// mul_mat_id graph: experts `[k, m, n_expert]` (dtype `wdt`), b, ids.
fn mul_mat_id_graph(
    ea: [u64; 4],
    wdt: DType,
    eb: [u64; 4],
    ei: [u64; 4],
) -> (Graph, [TensorId; 4]) {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, ea).unwrap();
    let aq = g.cont(a, wdt).unwrap();
    let b = g.input("b", DType::F32, eb).unwrap();
    let ids = g.input("ids", DType::I32, ei).unwrap();
    let r = g.mul_mat_id(aq, b, ids).unwrap();
    (g, [a, b, ids, r])
}

#[test]
fn mul_mat_id_routes_tokens_to_experts() {
    // Expert x is (x + 1)·I, so r[:, e, t] = (ids[e, t] + 1)·b[:, 0, t].
    let (mut g, [a, b, ids, r]) =
        mul_mat_id_graph([2, 2, 3, 1], DType::F32, [2, 1, 2, 1], [2, 2, 1, 1]);
    assert_eq!(g.ne(r), [2, 2, 2, 1]);
    let out = run(
        &mut g,
        &[
            (
                a,
                f32_bytes(&[1., 0., 0., 1., 2., 0., 0., 2., 3., 0., 0., 3.]),
            ),
            (b, f32_bytes(&[1., 2., 3., 4.])),
            (ids, i32_bytes(&[2, 0, 1, 1])),
        ],
        &[r],
    );
    assert_eq!(out[0], vec![3., 6., 1., 2., 6., 8., 6., 8.]);
}

#[test]
fn mul_mat_id_rejects_bad_ids() {
    for bad in [3, -1] {
        let (mut g, [a, b, ids, r]) =
            mul_mat_id_graph([2, 2, 3, 1], DType::F32, [2, 1, 2, 1], [2, 2, 1, 1]);
        g.mark_output(r).unwrap();
        let mut exe = CpuBackend.compile(&g).unwrap();
        let (av, bv, iv) = (
            f32_bytes(&[0.; 12]),
            f32_bytes(&[0.; 4]),
            i32_bytes(&[0, 1, bad, 2]),
        );
        let e = exe.run(&[(a, &av), (b, &bv), (ids, &iv)]).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 2, 3, 1]).unwrap();
    let b = g.input("b", DType::F32, [3, 1, 2, 1]).unwrap();
    let ids = g.input("ids", DType::I32, [2, 2, 1, 1]).unwrap();
    assert!(g.mul_mat_id(a, b, ids).is_err(), "k mismatch");
    let b = g.input("b2", DType::F32, [2, 1, 2, 1]).unwrap();
    let fids = g.input("fids", DType::F32, [2, 2, 1, 1]).unwrap();
    assert!(g.mul_mat_id(a, b, fids).is_err(), "f32 ids");
}

#[test]
fn fixture_mul_mat_id_q8_0_experts() {
    for name in ["mul_mat_id", "mul_mat_id_bcast"] {
        let f = load::load("seq", name);
        let (a, b, ids) = (f.input("experts"), f.input("b"), f.input("ids"));
        let (mut g, [ai, bi, ii, r]) = mul_mat_id_graph(a.ne, DType::Q8_0, b.ne, ids.ne);
        assert_eq!(g.ne(r), f.expected.ne);
        let idv: Vec<i32> = ids.data.iter().map(|&x| x as i32).collect();
        let out = run(
            &mut g,
            &[
                (ai, f32_bytes(&a.data)),
                (bi, f32_bytes(&b.data)),
                (ii, i32_bytes(&idv)),
            ],
            &[r],
        );
        f.check_abs_rel(&out[0], 1e-5, 1e-5);
    }
}
