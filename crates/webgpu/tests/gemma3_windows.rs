//! A synthetic Gemma 3 whose embedding (also its tied output matrix) is over the binding limit,
//! run through `Session` on the WebGPU backend against the CPU: the embedding lookup and the
//! logits product run in windows of vocabulary rows, as the real Gemma 3's 262144 × 640 Q8_0
//! matrix (~178 MB) must on a device binding at most 128 MiB.
//!
//! `WebGpuConfig::max_binding_bytes` sets the limit to 32 KiB: the 2048 × 64 Q8_0 embedding
//! (139 KB) needs 5 windows, while every other weight, activation and cache binding fits.
//! Tolerance 1e-6 on the logits NMSE, as for the other session tests (the backends differ only
//! by summation order and WGSL's transcendental functions).

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::{Session, SessionConfig};
use wgllm_webgpu::testing::nmse;
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const PROMPT: [u32; 11] = [1, 5, 9, 3, 1777, 12, 40, 2047, 95, 0, 1033];
const LIMIT: u64 = 32 << 10;

fn gemma() -> GgufFile {
    let shape = LlamaShape {
        n_vocab: 2048,
        rope_base: 1_000_000.0,
        tied_output: true,
        ..LlamaShape::TINY
    };
    let arch = SynthArch::Gemma3 {
        head_dim: 32,
        window: 4,
    };
    let bytes = model_gguf(arch, &shape, DType::Q8_0, 7).unwrap_or_else(|e| panic!("{e}"));
    GgufFile::from_bytes(Bytes::from(bytes)).unwrap_or_else(|e| panic!("{e}"))
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn gemma3_with_an_oversized_embedding_matches_cpu() {
    let config = WebGpuConfig {
        max_binding_bytes: Some(LIMIT),
        ..WebGpuConfig::default()
    };
    let gpu = WebGpuBackend::new(config).unwrap_or_else(|e| panic!("{e}"));
    // Session has no CPU fallback: an unsplit embedding would fail to compile.
    assert_eq!(gpu.capabilities().binding_limit, LIMIT);
    let f = gemma();
    let cfg = SessionConfig {
        n_ctx: 32,
        ubatch: 8,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let mut cpu = Session::new(&CpuBackend, &f, cfg).unwrap_or_else(|e| panic!("{e}"));
    let mut wg = Session::new(&gpu, &f, cfg).unwrap_or_else(|e| panic!("{e}"));
    let mut want = cpu.eval(&PROMPT).unwrap_or_else(|e| panic!("{e}"));
    let mut got = wg.eval(&PROMPT).unwrap_or_else(|e| panic!("{e}"));
    for step in 0..=4 {
        let err = nmse(&got[0], &want[0]);
        println!("step {step} (n_past {}): NMSE {err:.3e}", wg.n_past());
        assert!(err < 1e-6, "step {step}: NMSE {err:e}");
        assert!(want[0].iter().any(|v| v.abs() > 1e-3), "logits are all ~0");
        if step == 4 {
            break;
        }
        let next = argmax(&want[0]);
        want = cpu.eval(&[next]).unwrap_or_else(|e| panic!("{e}"));
        got = wg.eval(&[next]).unwrap_or_else(|e| panic!("{e}"));
    }
}
