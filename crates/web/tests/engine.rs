//! The browser engine run natively: the CPU reference and WebGPU (lavapipe in CI) produce the
//! same greedy text for a synthetic model (the op table itself runs natively in
//! `wgllm-webgpu`'s tests).

mod common;

use wgllm_web::{Device, Engine, EngineConfig};

#[test]
fn synthetic_model_greedy_text_is_the_same_on_webgpu_and_cpu() {
    let cpu = pollster::block_on(common::greedy(Device::Cpu, 12));
    let gpu = pollster::block_on(common::greedy(Device::WebGpu, 12));
    assert_eq!(cpu.1, 12, "the CPU run stopped early: {cpu:?}");
    assert_eq!(gpu, cpu);
}

#[test]
fn engine_reports_missing_model_and_bad_files() {
    let mut e = pollster::block_on(Engine::open(Device::Cpu, EngineConfig::default())).unwrap();
    assert!(e.prompt_ids("hi", false).is_err());
    let err = e.load(b"GGUF but not really".to_vec().into()).unwrap_err();
    assert!(matches!(err, wgllm_web::WebError::Gguf(_)), "{err}");
    assert!(e.model_summary().is_none());
}

#[test]
fn synthetic_model_greedy_text_is_pinned() {
    let cpu = pollster::block_on(common::greedy(Device::Cpu, 12));
    assert_eq!(cpu.0, common::NATIVE_GREEDY_TEXT, "{:?}", cpu.0);
}
