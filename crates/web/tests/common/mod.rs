//! Checks shared by the native tests (`tests/engine.rs`) and the browser tests
//! (`tests/browser.rs`, headless Chromium through wasm-bindgen-test).

use wgllm_core::DType;
use wgllm_models::sampler::SamplerConfig;
use wgllm_models::synth::{llama_gguf, model_gguf, LlamaShape, SynthArch};
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
        .generate(&ids, max_tokens, SamplerConfig::greedy(), None, |t| {
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

/// A tiny BERT (an embedding model) with a WordPiece vocabulary of lower-case letters, in q8_0
/// (f16 weights need shader-f16, which the browser tests' SwiftShader lacks).
pub fn synth_bert() -> Vec<u8> {
    let shape = LlamaShape {
        n_head_kv: 4,
        n_ctx_train: 64,
        ..LlamaShape::TINY
    };
    model_gguf(SynthArch::Bert, &shape, DType::Q8_0, 5).expect("synthetic bert")
}

/// Texts the embedding checks embed: of different lengths, one empty.
pub const EMBED_TEXTS: [&str; 3] = ["hello browser", "", "a longer text, with words: 1, 2, 3!"];

/// Unit embeddings of [`EMBED_TEXTS`] by [`synth_bert`] on `device`.
pub async fn embeddings(device: Device) -> Vec<Vec<f32>> {
    let mut e = engine(device).await;
    let summary = e.load(synth_bert().into()).expect("load");
    assert!(summary.contains("embeddings of 64 values"), "{summary}");
    let texts: Vec<String> = EMBED_TEXTS.iter().map(|t| t.to_string()).collect();
    e.embed(&texts, true, false).await.expect("embed")
}

/// A small synthetic multilingual Whisper in f32 (browsers may lack shader-f16).
pub fn synth_whisper() -> Vec<u8> {
    let c = wgllm_speech::synth::preset("whisper-test").expect("preset");
    wgllm_speech::synth::whisper_gguf(&c, DType::F32, 3).expect("synthetic whisper")
}

/// A 16 kHz mono 16-bit WAV of 1.5 s of a gliding tone.
pub fn test_wav() -> Vec<u8> {
    let n = 24_000u32;
    let mut v = Vec::new();
    v.extend_from_slice(b"RIFF");
    v.extend_from_slice(&(36 + 2 * n).to_le_bytes());
    v.extend_from_slice(b"WAVEfmt ");
    for x in [
        16u32.to_le_bytes(),
        [1, 0, 1, 0],
        16_000u32.to_le_bytes(),
        32_000u32.to_le_bytes(),
        [2, 0, 16, 0],
    ] {
        v.extend_from_slice(&x);
    }
    v.extend_from_slice(b"data");
    v.extend_from_slice(&(2 * n).to_le_bytes());
    for i in 0..n {
        let t = i as f32 / 16_000.0;
        let s = (2.0 * std::f32::consts::PI * (300.0 + 300.0 * t) * t).sin() * 9000.0;
        v.extend_from_slice(&(s as i16).to_le_bytes());
    }
    v
}

/// The synthetic Whisper's greedy transcript (verbose JSON, language given) of [`test_wav`] on
/// `device`, and the summary line of its load.
pub async fn transcript(device: Device) -> (String, String) {
    let mut e = engine(device).await;
    let summary = e.load(synth_whisper().into()).expect("load");
    let mut progress = Vec::new();
    let json = e
        .transcribe(
            test_wav(),
            Some("wav"),
            "en",
            false,
            "verbose_json",
            false,
            |f| progress.push(f),
        )
        .await
        .expect("transcribe");
    assert_eq!(progress.last().copied(), Some(1.0), "{progress:?}");
    (json, summary)
}

/// [`transcript`]'s JSON from the native CPU backend.
pub const NATIVE_WHISPER_JSON: &str = r#"{"segments": [{"tokens": [29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877, 29877]}]}"#;
