//! In headless Chromium (wasm-bindgen-test, WebGPU on SwiftShader): the op-table subset a model
//! needs matches the CPU reference, and a synthetic model's greedy text on the browser's WebGPU
//! equals the CPU backend's (run in the same wasm module).
//!
//! Run: `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
//! cargo test -p wgllm-web --target wasm32-unknown-unknown --test browser` with chromedriver on
//! the PATH (`webdriver.json` here passes `--enable-unsafe-webgpu`).
#![cfg(target_arch = "wasm32")]

mod common;

use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};
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
