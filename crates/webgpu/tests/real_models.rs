//! SmolLM2-135M Q4_1 and Gemma 3 270M on the WebGPU backend against the independent numpy
//! reference (`scripts/reference/`): the same checks as the CPU backend's
//! `crates/models/tests/real_models.rs`.
//!
//! They need the model files, so they are ignored by default: run `wgllm pull smollm2` and
//! `wgllm pull gemma3-270m`, then
//! `cargo test -p wgllm-webgpu --release --test real_models -- --ignored`. `.ci/run` runs the
//! SmolLM2 one on lavapipe.

use wgllm_core::DType;
use wgllm_gguf::GgufFile;
use wgllm_models::config::model_cache_dir;
use wgllm_models::reference::{compare, verdict, Fixture};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

fn check(file: &str, fixture: &str, max_prompts: usize, max_steps: usize, tol: f32) {
    let f = GgufFile::open(model_cache_dir().join(file))
        .unwrap_or_else(|e| panic!("{file} in the model cache (wgllm pull): {e}"));
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    println!("adapter: {}", gpu.adapter().name);
    let fx = Fixture::parse(fixture).unwrap();
    let reports = compare(&gpu, &f, &fx, DType::F32, max_prompts, max_steps).unwrap();
    verdict(&reports, tol, 16.min(max_steps)).unwrap();
}

/// The kernels accumulate in f32 in yet another order than the CPU reference; seen ~1e-4.
const TOL: f32 = 1e-3;

/// The first prompt, 32 greedy steps: what CI runs on lavapipe (a few minutes there).
#[test]
#[ignore = "needs SmolLM2 in the model cache"]
fn smollm2_matches_reference_32_steps() {
    check(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        include_str!("../../models/tests/fixtures/reference/smollm2.json"),
        1,
        32,
        TOL,
    );
}

#[test]
#[ignore = "needs SmolLM2 in the model cache"]
fn smollm2_matches_reference_all_prompts() {
    check(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        include_str!("../../models/tests/fixtures/reference/smollm2.json"),
        usize::MAX,
        usize::MAX,
        TOL,
    );
}

#[test]
#[ignore = "needs Gemma 3 270M in the model cache"]
fn gemma3_matches_reference_all_prompts() {
    check(
        "gemma-3-270m-q4_k_m.gguf",
        include_str!("../../models/tests/fixtures/reference/gemma3.json"),
        usize::MAX,
        usize::MAX,
        TOL,
    );
}
