//! A synthetic multilingual Whisper (random weights at a small shape) run end to end: on the
//! CPU reference and on WebGPU (lavapipe in CI), whose encoder states and greedy transcripts
//! must agree; and whisper.cpp's file format read back into the same tensors.

use std::sync::Arc;

use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::synth::{preset, whisper_gguf};
use wgllm_speech::{Audio, Transcriber, WhisperModel};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

fn model(dtype: DType) -> Arc<WhisperModel> {
    let c = preset("whisper-test").unwrap();
    let bytes = whisper_gguf(&c, dtype, 7).unwrap();
    Arc::new(WhisperModel::from_gguf(GgufFile::from_bytes(bytes.into()).unwrap()).unwrap())
}

/// 3 s of a gliding tone with a little noise.
fn audio() -> Audio {
    let mut state = 1u32;
    let samples = (0..48_000)
        .map(|i| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let t = i as f32 / 16_000.0;
            let noise = (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            0.3 * (2.0 * std::f32::consts::PI * (300.0 + 200.0 * t) * t).sin() + 0.02 * noise
        })
        .collect();
    Audio { samples }
}

fn greedy() -> DecodeOptions {
    DecodeOptions {
        language: Some(0),
        temperature_inc: 0.0,
        ..DecodeOptions::default()
    }
}

#[test]
fn cpu_transcription_runs_and_repeats() {
    let m = model(DType::F16);
    let mut t = Transcriber::new(Arc::clone(&m), &CpuBackend).unwrap();
    let a = audio();
    let one = t.transcribe(&a, &greedy(), |_| {}).unwrap();
    let two = t.transcribe(&a, &greedy(), |_| {}).unwrap();
    assert_eq!(one, two, "a second run of the same audio differs");
    for s in &one.segments {
        assert!(s.t0 <= s.t1 && s.t1 <= 3000, "segment {s:?}");
    }
    let mel = t.mel(&a);
    let states = t.encoder_states(&mel, 0).unwrap();
    assert_eq!(states.len(), 64 * 1500);
    assert!(states.iter().all(|v| v.is_finite()));
    // Detection answers one of the model's languages.
    let (lang, p) = t.detect_language(&a).unwrap();
    assert!(lang < m.vocab.n_languages && p > 0.0 && p <= 1.0);
}

#[test]
fn webgpu_matches_the_cpu_reference() {
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    for dtype in [DType::F32, DType::F16, DType::Q8_0] {
        let m = model(dtype);
        let mut cpu = Transcriber::new(Arc::clone(&m), &CpuBackend).unwrap();
        let mut wg = Transcriber::new(Arc::clone(&m), &gpu).unwrap();
        let a = audio();
        let mel = cpu.mel(&a);
        let want = cpu.encoder_states(&mel, 0).unwrap();
        let got = wg.encoder_states(&mel, 0).unwrap();
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = want
            .iter()
            .zip(&got)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst < 2e-3 * scale.max(1.0),
            "{dtype}: encoder states differ by {worst} (scale {scale})"
        );
        let want = cpu.transcribe(&a, &greedy(), |_| {}).unwrap();
        let got = wg.transcribe(&a, &greedy(), |_| {}).unwrap();
        let ids = |t: &wgllm_speech::Transcript| {
            t.segments
                .iter()
                .flat_map(|s| s.tokens.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&got), ids(&want), "{dtype}: tokens differ");
    }
}
