//! Embedding models on the WebGPU backend: a synthetic BERT and a synthetic Qwen3 embedder
//! (last-token pooling) against the CPU backend (always run), and all-MiniLM-L6-v2 against the independent numpy reference in f32, f16 and q8_0, as
//! `crates/models/tests/embed_models.rs` checks it on the CPU.
//!
//! The MiniLM checks need the checkpoint, so they are ignored by default: run
//! `wgllm pull minilm`, then `cargo test -p wgllm-webgpu --test embed_models -- --ignored`.
//! `.ci/run` runs them on lavapipe.

use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::{GgufFile, GgufWriter, Value};
use wgllm_models::embed::cosine;
use wgllm_models::embed_reference::{
    compare_embeddings, converted_checkpoint, embed_verdict, EmbedFixture,
};
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::{EmbedConfig, Embedder, Truncate};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const FIXTURE: &str = include_str!("../../models/tests/fixtures/minilm_embed.json");

fn gpu() -> WebGpuBackend {
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    println!("adapter: {}", gpu.adapter().name);
    gpu
}

#[test]
fn synthetic_bert_matches_the_cpu_backend() {
    let shape = LlamaShape {
        n_head_kv: 4,
        n_ctx_train: 64,
        ..LlamaShape::TINY
    };
    for dtype in [DType::F32, DType::F16, DType::Q8_0] {
        let bytes = model_gguf(SynthArch::Bert, &shape, dtype, 3).unwrap();
        let f = GgufFile::from_bytes(bytes.into()).unwrap();
        let texts = [
            "hello world",
            "",
            "a longer input, with punctuation: 1, 2, 3!",
        ];
        let gpu = gpu();
        let cfg = EmbedConfig::default();
        let mut on_gpu = Embedder::new(&f, cfg).unwrap();
        let mut on_cpu = Embedder::new(&f, cfg).unwrap();
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| on_cpu.tokenize(t, Truncate::No).unwrap())
            .collect();
        let want = on_cpu.embed_ids(&CpuBackend, &ids, true).unwrap();
        let got = on_gpu.embed_ids(&gpu, &ids, true).unwrap();
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            let c = cosine(w, g);
            assert!(c > 0.99999, "{dtype} input {i}: cosine {c}");
        }
        // Its graphs belong to the backend they were compiled on.
        let err = on_cpu.embed_ids(&gpu, &ids, true).unwrap_err().to_string();
        assert!(err.contains("compiled on the cpu backend"), "{err}");
    }
}

/// `bytes` with `{arch}.pooling_type` = 3 (last) added: a decoder as llama.cpp writes an
/// embedding model of it.
fn with_last_pooling(bytes: Vec<u8>, arch: &str) -> GgufFile {
    let f = GgufFile::from_bytes(bytes.into()).unwrap();
    let pooling = (format!("{arch}.pooling_type"), Value::U32(3));
    let w = GgufWriter::with_metadata(&f, [pooling]).unwrap();
    GgufFile::from_bytes(w.to_vec().into()).unwrap()
}

#[test]
fn synthetic_qwen3_embedder_matches_the_cpu_backend() {
    let arch = SynthArch::Qwen3 { head_dim: 16 };
    let f = with_last_pooling(
        model_gguf(arch, &LlamaShape::TINY, DType::Q8_0, 4).unwrap(),
        "qwen3",
    );
    let inputs: Vec<Vec<u32>> = vec![
        vec![5, 77, 200, 13],
        vec![42],
        (0..37).map(|i| i * 7 % 300).collect(),
    ];
    let gpu = gpu();
    let cfg = EmbedConfig::default();
    let want = Embedder::new(&f, cfg)
        .unwrap()
        .embed_ids(&CpuBackend, &inputs, true)
        .unwrap();
    let got = Embedder::new(&f, cfg)
        .unwrap()
        .embed_ids(&gpu, &inputs, true)
        .unwrap();
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let c = cosine(w, g);
        assert!(c > 0.99999, "input {i}: cosine {c}");
    }
}

fn check_minilm(dtype: DType, min: f64) {
    let path = converted_checkpoint("minilm", dtype).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let fx = EmbedFixture::parse(FIXTURE).unwrap();
    let reports = compare_embeddings(&gpu(), &f, &fx).unwrap();
    for r in &reports {
        println!(
            "{dtype}: cosine {:.8} (alone {:.8}): {:?}",
            r.cosine_batched, r.cosine_alone, r.text
        );
    }
    let _ = std::fs::remove_file(&path);
    embed_verdict(&reports, min).unwrap();
}

#[test]
#[ignore = "needs the MiniLM checkpoint (wgllm pull minilm)"]
fn minilm_f32_on_webgpu_matches_reference() {
    check_minilm(DType::F32, 0.9999);
}

#[test]
#[ignore = "needs the MiniLM checkpoint (wgllm pull minilm)"]
fn minilm_f16_on_webgpu_matches_reference() {
    check_minilm(DType::F16, 0.9999);
}

#[test]
#[ignore = "needs the MiniLM checkpoint (wgllm pull minilm)"]
fn minilm_q8_0_on_webgpu_matches_reference() {
    check_minilm(DType::Q8_0, 0.999);
}
