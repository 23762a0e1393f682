//! `wgllm bench` on a Whisper model: the encoder's time per 30 s window (mel frames uploaded,
//! both convolutions, every layer and the cross-attention caches, the states read back), and a
//! whole transcription of 30 s of a test signal (spectrogram, encoder, greedy decoding without
//! fallback) as a real-time factor and decoded tokens/s. Mean ± stddev over `-r` runs after a
//! warm-up. `--audio FILE` transcribes that file instead. A synthetic model decodes as many
//! tokens as the window allows (it never stops early), which whisper.cpp does the same way on the
//! same file (`wgllm convert X.gguf -o X.bin`). `--profile` then times one more encoder run
//! kernel by kernel, grouped by kernel family.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::{Audio, Transcriber, WhisperModel};

use super::backend::OpenedBackend;
use super::bench::{Args, Format};
use super::bench_profile;

/// Mean and sample stddev.
fn stats(xs: &[f64]) -> (f64, f64) {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len().max(2) - 1) as f64;
    (mean, var.sqrt())
}

/// 30 s of a gliding tone, the same every run (bench/whisper_vs_whispercpp.sh writes it as the
/// WAV whisper.cpp transcribes).
fn signal() -> Audio {
    let samples = (0..30 * 16_000)
        .map(|i| {
            let t = i as f64 / 16_000.0;
            let v = 0.3 * (2.0 * std::f64::consts::PI * (200.0 + 20.0 * t) * t).sin();
            // As a 16-bit WAV holds it.
            (v * 32767.0).trunc() as f32 / 32768.0
        })
        .collect();
    Audio { samples }
}

/// Times the Whisper model at `path` and prints the table (or JSON).
pub fn run(args: &Args, path: &Path, name: &str, out: &mut impl Write) -> Result<()> {
    let model = Arc::new(WhisperModel::open(path)?);
    let (opened, desc) = args.backend.open_typed()?;
    if args.profile && !matches!(opened, OpenedBackend::WebGpu(_)) {
        eprintln!("wgllm bench: --profile needs the webgpu backend; skipped");
    }
    let c = model.config.clone();
    let t0 = Instant::now();
    let mut t = Transcriber::new(model, opened.as_dyn())?;
    let compile_s = t0.elapsed().as_secs_f64();
    let audio = match &args.audio {
        Some(f) => {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let ext = f.extension().and_then(|e| e.to_str());
            wgllm_speech::audio::decode(bytes, ext, None)
                .with_context(|| format!("decoding {}", f.display()))?
        }
        None => signal(),
    };
    let mel = t.mel(&audio);

    t.encoder_states(&mel, 0)?;
    let mut enc = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        let t0 = Instant::now();
        t.encoder_states(&mel, 0)?;
        enc.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let profile = match (&opened, args.profile) {
        (OpenedBackend::WebGpu(gpu), true) => {
            bench_profile::profile_once(gpu, || Ok(t.encoder_states(&mel, 0)?))?
        }
        _ => Vec::new(),
    };
    let opts = DecodeOptions {
        language: model_language(&t),
        temperature_inc: 0.0,
        best_of: 1,
        ..DecodeOptions::default()
    };
    let tr = t.transcribe(&audio, &opts, |_| {})?;
    let tokens: usize = tr.segments.iter().map(|s| s.tokens.len()).sum();
    let mut whole = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        let t0 = Instant::now();
        t.transcribe(&audio, &opts, |_| {})?;
        whole.push(t0.elapsed().as_secs_f64());
    }
    let (enc_mean, enc_std) = stats(&enc);
    let (w_mean, w_std) = stats(&whole);
    let secs = audio.seconds();
    match args.output {
        Format::Json => {
            let report = json!({
                "model": name,
                "backend": desc,
                "layers": [c.n_audio_layer, c.n_text_layer],
                "width": c.n_audio_state,
                "compile_s": compile_s,
                "encode_ms": {"mean": enc_mean, "stddev": enc_std},
                "transcribe_s": {"mean": w_mean, "stddev": w_std, "audio_s": secs, "tokens": tokens},
                "real_time_factor": w_mean / secs,
                "encode_profile": bench_profile::to_json(&profile),
            });
            writeln!(out, "{report:#}")?;
        }
        Format::Md | Format::Csv => {
            writeln!(
                out,
                "model: {name} (whisper, {} + {} layers {} wide), on {desc}, compiled in {compile_s:.2} s",
                c.n_audio_layer, c.n_text_layer, c.n_audio_state
            )?;
            writeln!(out)?;
            writeln!(out, "| test | time | rate |")?;
            writeln!(out, "| --- | ---: | ---: |")?;
            writeln!(
                out,
                "| encode one 30 s window | {enc_mean:.2} ± {enc_std:.2} ms | {:.1} windows/s |",
                1000.0 / enc_mean
            )?;
            writeln!(
                out,
                "| transcribe {secs:.0} s ({tokens} tokens, greedy) | {w_mean:.3} ± {w_std:.3} s | real-time factor {:.4}, {:.0} tokens/s |",
                w_mean / secs,
                tokens as f64 / w_mean
            )?;
            if !profile.is_empty() {
                bench_profile::write_table(out, "one 30 s window's encoder run", &profile)?;
            }
        }
    }
    Ok(())
}

/// English for a multilingual model (no detection pass in the timing), none for an
/// English-only one.
fn model_language(t: &Transcriber) -> Option<usize> {
    t.model().vocab.multilingual.then_some(0)
}
