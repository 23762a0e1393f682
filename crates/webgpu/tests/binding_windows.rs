//! get_rows tables and mul_mat weights larger than one storage binding, split into windows of
//! rows (one dispatch per window), against the CPU reference.
//!
//! Real devices bind at most 128 MiB (lavapipe) to 2–4 GiB; Gemma 3's embedding and tied output
//! matrix are ~178 MB in Q8_0. Here `WebGpuConfig::max_binding_bytes` lowers the limit to 4 KiB
//! so small tables need 2 to 30 windows, with row counts that leave a short last window and
//! row sizes (q4_0, q8_0 with an odd block count) that start windows at unaligned offsets.
//! Products whose activations and results outgrow the limit run as slices of columns. Tolerances as in the op table:
//! gathers exact (quantized ones to f32 rounding of the same decode), products 1e-9.

use bytes::Bytes;
use wgllm_core::{Backend, DType, Graph, Result};
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::testing::{random_bytes, run_case, Built, Case, Outcome, Rng};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const LIMIT: u64 = 4096;

fn backend() -> WebGpuBackend {
    let config = WebGpuConfig {
        max_binding_bytes: Some(LIMIT),
        ..WebGpuConfig::default()
    };
    WebGpuBackend::new(config).unwrap_or_else(|e| panic!("{e}"))
}

fn input(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    dtype: DType,
    ne: [u64; 4],
) -> Result<wgllm_core::TensorId> {
    let t = g.input(&format!("in{}", b.inputs.len()), dtype, ne)?;
    let n = ne.iter().product();
    b.inputs.push((t, random_bytes(rng, dtype, n, -1.0, 1.0)?));
    Ok(t)
}

fn weight(
    g: &mut Graph,
    rng: &mut Rng,
    dtype: DType,
    ne: [u64; 4],
) -> Result<wgllm_core::TensorId> {
    let data = random_bytes(rng, dtype, ne.iter().product(), -1.0, 1.0)?;
    g.weight("w", dtype, ne, Bytes::from(data))
}

/// Row indices in `0..rows` (first and last included) as i32 bytes.
fn indices(rng: &mut Rng, rows: u64, n: u64) -> Vec<u8> {
    (0..n)
        .map(|i| match i {
            0 => rows - 1,
            1 => 0,
            _ => rng.below(rows),
        })
        .flat_map(|r| (r as i32).to_le_bytes())
        .collect()
}

fn get_rows_case(table: DType, ne0: u64, rows: u64, idx: [u64; 2]) -> Case {
    let tol = if table.is_quantized() { 1e-12 } else { 0.0 };
    Case {
        op: "GET_ROWS",
        name: format!("GET_ROWS {table} [{ne0},{rows}] by {idx:?}"),
        max_nmse: tol,
        build: Box::new(move |g, rng| {
            let mut b = Built::default();
            let w = weight(g, rng, table, [ne0, rows, 1, 1])?;
            let i = g.input("idx", DType::I32, [idx[0], idx[1], 1, 1])?;
            b.inputs.push((i, indices(rng, rows, idx[0] * idx[1])));
            let r = g.get_rows(w, i)?;
            g.mark_output(r)?;
            Ok(b)
        }),
    }
}

fn mul_mat_case(wt: DType, k: u64, m: u64, n: u64, batch: u64) -> Case {
    Case {
        op: "MUL_MAT",
        name: format!("MUL_MAT {wt} x f32 k={k} m={m} n={n} batch {batch}"),
        max_nmse: 1e-9,
        build: Box::new(move |g, rng| {
            let mut b = Built::default();
            let a = weight(g, rng, wt, [k, m, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [k, n, batch, 1])?;
            let r = g.mul_mat(a, x)?;
            g.mark_output(r)?;
            Ok(b)
        }),
    }
}

fn cases() -> Vec<Case> {
    vec![
        get_rows_case(DType::F32, 33, 301, [7, 3]),
        get_rows_case(DType::F16, 33, 257, [19, 1]),
        get_rows_case(DType::I32, 7, 1031, [9, 2]),
        get_rows_case(DType::Q8_0, 96, 331, [8, 1]),
        get_rows_case(DType::Q4_0, 32, 777, [5, 3]),
        get_rows_case(DType::Q6_K, 256, 41, [3, 1]),
        get_rows_case(DType::Q4_K, 256, 97, [1, 1]),
        mul_mat_case(DType::F32, 33, 197, 3, 1),
        mul_mat_case(DType::F16, 64, 131, 5, 1),
        mul_mat_case(DType::Q8_0, 96, 149, 1, 1),
        mul_mat_case(DType::Q8_0, 64, 97, 3, 2),
        mul_mat_case(DType::Q4_0, 32, 301, 1, 1),
        mul_mat_case(DType::Q6_K, 256, 61, 3, 1),
        mul_mat_case(DType::Q4_K, 256, 33, 2, 1),
        mul_mat_case(DType::IQ4_NL, 64, 127, 4, 1),
        // Activations and results past the limit too (a prompt's logits): slices of columns,
        // each through the tiled kernel or the mat-vec, with the weight's windows inside.
        mul_mat_case(DType::Q4_0, 64, 100, 70, 1),
        mul_mat_case(DType::F32, 32, 300, 24, 1),
        mul_mat_case(DType::Q4_K, 256, 40, 19, 1),
        mul_mat_case(DType::F16, 64, 131, 100, 1),
        mul_mat_case(DType::Q8_0, 96, 900, 3, 1),
    ]
}

#[test]
fn oversized_tables_and_weights_run_in_windows_and_match_cpu() {
    let gpu = backend();
    let mut failures = Vec::new();
    for case in cases().iter() {
        let r = run_case(&CpuBackend, &gpu, case, 500);
        println!("{:<60} {:?}", r.name, r.outcome);
        if !matches!(r.outcome, Outcome::Pass { .. }) {
            failures.push(format!("{}: {:?}", r.name, r.outcome));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_split_is_several_dispatches_over_one_weight_buffer() {
    let gpu = backend();
    let caps = gpu.capabilities();
    assert_eq!(caps.binding_limit, LIMIT);
    let align = u64::from(caps.limits.min_storage_buffer_offset_alignment);
    let mut g = Graph::new();
    let mut rng = Rng::new(3);
    // 331 rows of 102 bytes (three q8_0 blocks) = 33762 bytes.
    let w = weight(&mut g, &mut rng, DType::Q8_0, [96, 331, 1, 1]).unwrap();
    let i = g.input("idx", DType::I32, [4, 1, 1, 1]).unwrap();
    let r = g.get_rows(w, i).unwrap();
    g.mark_output(r).unwrap();
    let exe = gpu.compile_webgpu(&g).unwrap();
    let per = (LIMIT - align - 4 - 102) / 102 + 1;
    assert_eq!(exe.dispatch_count() as u64, 331u64.div_ceil(per));
    assert!(exe.dispatch_count() > 1);
    // The weight is uploaded once, whole (33762 bytes, padded to words, plus the one word of
    // slack block decoders may read past the end); windows are binding ranges of it.
    assert_eq!(exe.memory_report().weights, 33764 + 4);
}

#[test]
fn other_ops_over_the_lowered_limit_are_unsupported() {
    let gpu = backend();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1024, 2, 1, 1]).unwrap();
    let y = g.scale(x, 2.0, 0.0).unwrap();
    let e = gpu.supports(&g, y).unwrap_err();
    assert!(e.to_string().contains("binding limit of 4096"), "{e}");
}
