//! Shared helpers for the CPU backend's op tests: build, run, read back as f32.

use wgllm_core::{Backend, DType, Graph, TensorId};
use wgllm_cpu::CpuBackend;

/// Little-endian bytes of f32 values.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of i32 values.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Compiles `g` on the CPU, runs it with `inputs` and returns each of `outs` as f32 values
/// (i32 results converted).
pub fn run(g: &mut Graph, inputs: &[(TensorId, Vec<u8>)], outs: &[TensorId]) -> Vec<Vec<f32>> {
    for &o in outs {
        g.mark_output(o).unwrap();
    }
    let mut exe = CpuBackend.compile(g).unwrap();
    let refs: Vec<(TensorId, &[u8])> = inputs.iter().map(|(t, b)| (*t, b.as_slice())).collect();
    exe.run(&refs).unwrap();
    outs.iter()
        .map(|&o| {
            let bytes = exe.read(o).unwrap();
            match g.dtype(o) {
                DType::I32 => bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
                    .collect(),
                dt => {
                    let mut v = vec![0f32; bytes.len() / dt.type_size() * dt.block_size()];
                    wgllm_core::quant::dequantize(dt, &bytes, &mut v).unwrap();
                    v
                }
            }
        })
        .collect()
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Asserts `got` equals `want` within `tol` absolutely (scaled by max(1, |want|)).
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "element {i}: got {g}, want {w}"
        );
    }
}
