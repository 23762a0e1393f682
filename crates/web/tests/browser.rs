//! In headless Chromium (wasm-bindgen-test, WebGPU on SwiftShader): the op-table subset a model
//! needs matches the CPU reference, a synthetic model's greedy text on the browser's WebGPU
//! equals the CPU backend's (run in the same wasm module), and so does the model streamed to
//! the GPU from a JavaScript `ReadableStream` (`loadStream`'s path); a synthetic embedding
//! model's vectors on the browser's WebGPU match the CPU backend's; a synthetic Whisper's
//! transcript on the browser's WebGPU equals the CPU backend's, and the native one.
//!
//! Run: `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
//! cargo test -p wgllm-web --target wasm32-unknown-unknown --test browser` with chromedriver on
//! the PATH (`webdriver.json` here passes `--enable-unsafe-webgpu`).
#![cfg(target_arch = "wasm32")]

mod common;

use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};
use wgllm_web::stream::load_stream;
use wgllm_web::{run_ops, Device, Engine, EngineConfig, MODEL_OPS};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn browser_adapter_opens_without_blocking() {
    let e = Engine::open(Device::WebGpu, EngineConfig::default())
        .await
        .expect("WebGPU in the browser");
    assert!(e.adapter().contains("BrowserWebGpu"), "{}", e.adapter());
}

/// Runs the cases of `ops` on the browser's WebGPU against the CPU reference.
async fn op_cases(ops: &[&str]) -> wgllm_web::OpSummary {
    let e = Engine::open(Device::WebGpu, EngineConfig::default())
        .await
        .unwrap();
    run_ops(e.backend(), ops, "", |_| {}).await
}

#[wasm_bindgen_test]
async fn model_op_subset_matches_the_cpu_reference() {
    let s = op_cases(MODEL_OPS).await;
    assert!(s.problems.is_empty(), "{:#?}", s.problems);
    assert!(s.passed > 50, "{s:?}");
}

#[wasm_bindgen_test]
async fn synthetic_model_greedy_text_equals_the_cpu_backend() {
    let cpu = common::greedy(Device::Cpu, 12).await;
    let gpu = common::greedy(Device::WebGpu, 12).await;
    assert_eq!(cpu.1, 12, "the CPU run stopped early: {cpu:?}");
    assert_eq!(gpu, cpu);
}

#[wasm_bindgen_test]
async fn synthetic_model_greedy_text_on_the_cpu_backend_in_wasm_equals_native() {
    // The native CPU backend's greedy text for the same model and prompt (tests/engine.rs
    // checks WebGPU against the CPU natively; this pins the wasm build of the engine to it).
    let cpu = common::greedy(Device::Cpu, 12).await;
    assert_eq!(cpu.1, 12, "{cpu:?}");
    assert_eq!(cpu.0, common::NATIVE_GREEDY_TEXT);
}

#[wasm_bindgen_test]
async fn a_model_streamed_from_a_readable_stream_gives_the_cpu_greedy_text() {
    let model = common::synth_model();
    let len = model.len() as u64;
    // Three parts, so the stream has chunk boundaries inside tensors whatever the blob's chunking.
    let parts = js_sys::Array::new();
    for part in [
        &model[..1000],
        &model[1000..len as usize - 777],
        &model[len as usize - 777..],
    ] {
        parts.push(&js_sys::Uint8Array::from(part));
    }
    let blob = web_sys::Blob::new_with_u8_array_sequence(&parts).unwrap();
    let progress = js_sys::Function::new_with_args(
        "loaded, total",
        "globalThis.wgllmProgress = (globalThis.wgllmProgress || []).concat([[loaded, total]]);",
    );
    let mut e = common::engine(Device::WebGpu).await;
    let summary = load_stream(&mut e, &blob.stream(), Some(len), None, &progress)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(summary.contains("21 tensors"), "{summary}");
    let calls = js_sys::Reflect::get(&js_sys::global(), &"wgllmProgress".into()).unwrap();
    let last = js_sys::Array::from(&calls).pop();
    let last: Vec<Option<f64>> = js_sys::Array::from(&last)
        .iter()
        .map(|v| v.as_f64())
        .collect();
    assert_eq!(last, [Some(len as f64); 2]);
    let got = common::greedy_loaded(&mut e, 12).await;
    assert_eq!(got.0, common::NATIVE_GREEDY_TEXT, "{got:?}");

    // A stream that ends inside a tensor: a clear error, nothing loaded.
    let cut = web_sys::Blob::new_with_u8_array_sequence(&js_sys::Array::of1(
        &js_sys::Uint8Array::from(&model[..model.len() - 1000]),
    ))
    .unwrap();
    let err = load_stream(&mut e, &cut.stream(), None, None, &progress)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("reaches past the end of the file"), "{err}");
    assert!(e.model_summary().is_none());
}

#[wasm_bindgen_test]
async fn synthetic_embeddings_on_webgpu_match_the_cpu_backend() {
    let cpu = common::embeddings(Device::Cpu).await;
    let gpu = common::embeddings(Device::WebGpu).await;
    assert_eq!(gpu.len(), common::EMBED_TEXTS.len());
    for (c, g) in cpu.iter().zip(&gpu) {
        let cos = wgllm_models::embed::cosine(c, g);
        assert!(cos > 0.99999, "{cos}");
    }
}

#[wasm_bindgen_test]
async fn synthetic_whisper_transcript_on_webgpu_equals_the_cpu_backend() {
    let (cpu, summary) = common::transcript(Device::Cpu).await;
    assert!(
        summary.contains("whisper, 2 + 2 layers 64 wide, multilingual"),
        "{summary}"
    );
    let (gpu, _) = common::transcript(Device::WebGpu).await;
    let tokens = |j: &str| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(j).unwrap();
        v["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tokens"].clone())
            .collect()
    };
    assert_eq!(tokens(&gpu), tokens(&cpu), "{gpu}\n{cpu}");
    assert_eq!(tokens(&cpu), tokens(common::NATIVE_WHISPER_JSON));
}
