//! Checks shared by the native tests (`tests/engine.rs`) and the browser tests
//! (`tests/browser.rs`, headless Chromium through wasm-bindgen-test).

use wgllm_core::DType;
use wgllm_models::sampler::SamplerConfig;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_web::{Device, Engine, EngineConfig};

/// A tiny llama with a byte-level vocabulary (n_vocab > 256: any text is one token per byte).
pub fn synth_model() -> Vec<u8> {
    let shape = LlamaShape::TINY;
    // Seed 12: with 11, greedy decoding after the prompt below ends (end-of-generation token)
    // after 5 tokens.
    llama_gguf(&shape, DType::Q4_0, 12).expect("synthetic model")
}

/// The engine the tests run the synthetic model on: a short context, small chunks.
pub async fn engine(device: Device) -> Engine {
    let config = EngineConfig {
        n_ctx: 64,
        ubatch: 8,
    };
    Engine::open(device, config).await.expect("open")
}

/// Greedy text, generated-token count and stop reason of the synthetic model on `device`.
pub async fn greedy(device: Device, max_tokens: usize) -> (String, usize, String) {
    let mut engine = engine(device).await;
    engine.load(synth_model().into()).expect("load");
    greedy_loaded(&mut engine, max_tokens).await
}

/// [`greedy`] on an engine that has loaded the synthetic model.
pub async fn greedy_loaded(engine: &mut Engine, max_tokens: usize) -> (String, usize, String) {
    let ids = engine.prompt_ids("Hello, browser", false).expect("ids");
    assert!(ids.len() >= 14, "one token per byte: {ids:?}");
    let mut text = String::new();
    let stats = engine
        .generate(&ids, max_tokens, SamplerConfig::greedy(), |t| {
            text.push_str(t);
            true
        })
        .await
        .expect("generate");
    (text, stats.generated_tokens, format!("{:?}", stats.stop))
}

/// The CPU backend's greedy text for [`synth_model`] after "Hello, browser" (12 tokens),
/// checked natively (`tests/engine.rs`) and in the browser (`tests/browser.rs`).
pub const NATIVE_GREEDY_TEXT: &str =
    "<tok_292>\u{fffd}<\u{19}\u{fffd}G\u{fffd}]\u{0}<tok_292>T\u{fffd}";
