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

#[test]
fn whisper_cpp_files_round_trip() {
    for dtype in [DType::F16, DType::Q5_0] {
        let m = model(dtype);
        let bin = wgllm_speech::ggml_bin::from_model(&m).unwrap();
        assert!(wgllm_speech::ggml_bin::is_ggml_bin(&bin));
        let back = WhisperModel::from_gguf(wgllm_speech::ggml_bin::to_gguf(&bin).unwrap()).unwrap();
        assert_eq!(back.config, m.config);
        assert_eq!(back.vocab.tokens, m.vocab.tokens);
        assert_eq!(back.filters, m.filters);
        for t in m.file.tensors() {
            let u = back
                .file
                .tensor(t.name())
                .unwrap_or_else(|| panic!("{} lost", t.name()));
            assert_eq!(
                (u.dtype(), u.shape()),
                (t.dtype(), t.shape()),
                "{}",
                t.name()
            );
            assert_eq!(
                back.file.tensor_data(u).unwrap(),
                m.file.tensor_data(t).unwrap(),
                "{}",
                t.name()
            );
        }
        // A file cut short is an error naming where.
        let err = wgllm_speech::ggml_bin::to_gguf(&bin[..bin.len() - 100])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("ends inside tensor"), "{err}");
    }
}

/// Language detection and translation against whisper.cpp on synthetic multilingual models
/// (Whisper tiny's shapes, random weights) that both run from the same file
/// (`scripts/whisper/gen_synth_fixtures.sh` wrote the fixture): the language whisper.cpp
/// detects in jfk.wav, and its greedy translation's tokens.
#[test]
fn synthetic_multilingual_models_detect_and_translate_as_whisper_cpp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("synthetic_multilingual.json")).unwrap(),
    )
    .unwrap();
    let wav = std::fs::read(dir.join("audio/jfk.wav")).unwrap();
    let a = wgllm_speech::audio::decode(wav, Some("wav"), None).unwrap();
    let opts = DecodeOptions {
        translate: true,
        temperature_inc: 0.0,
        best_of: 1,
        ..DecodeOptions::default()
    };
    for case in fixture["cases"].as_array().unwrap() {
        let seed = case["seed"].as_u64().unwrap();
        let c = preset(case["preset"].as_str().unwrap()).unwrap();
        let dtype = DType::from_name(case["dtype"].as_str().unwrap()).unwrap();
        let bytes = whisper_gguf(&c, dtype, seed).unwrap();
        let m =
            Arc::new(WhisperModel::from_gguf(GgufFile::from_bytes(bytes.into()).unwrap()).unwrap());
        let mut t = Transcriber::new(m, &CpuBackend).unwrap();
        let tr = t.transcribe(&a, &opts, |_| {}).unwrap();
        let lang = wgllm_speech::lang::code(tr.language.unwrap());
        assert_eq!(lang, case["language"], "seed {seed}");
        let p = f64::from(tr.language_prob.unwrap());
        assert!(
            (p - case["language_p"].as_f64().unwrap()).abs() < 0.01,
            "seed {seed}: p {p}"
        );
        let want: Vec<Vec<u64>> = case["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap())
                    .collect()
            })
            .collect();
        let got: Vec<Vec<u64>> = tr
            .segments
            .iter()
            .map(|s| s.tokens.iter().map(|&t| u64::from(t)).collect())
            .collect();
        assert_eq!(got, want, "seed {seed}: tokens");
    }
}
