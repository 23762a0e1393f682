//! Whisper tiny.en against whisper.cpp: on every committed clip, the greedy token ids, the text
//! and the segment times (within 20 ms) that whisper.cpp 1.8.5's CPU build gives on the same
//! weights (`scripts/whisper/gen_fixtures.sh` wrote the fixtures), and its SRT and VTT cues, on
//! the CPU reference and on
//! WebGPU; whisper.cpp's log-mel spectrogram of jfk.wav; the FLAC, MP3 and Ogg copies of jfk.wav
//! decoded and transcribed like the WAV.
//!
//! They need the checkpoint, so they are ignored by default: run `wgllm pull whisper-tiny.en`,
//! then `cargo test -p wgllm-speech --test whisper_cpp_fixtures -- --ignored`. `.ci/run` runs them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use wgllm_core::Backend;
use wgllm_cpu::CpuBackend;
use wgllm_models::config::model_cache_dir;
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::format::{self, Format};
use wgllm_speech::{audio, Audio, Transcriber, WhisperModel};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn model() -> Arc<WhisperModel> {
    let path = model_cache_dir().join("whisper-tiny.en.F16.gguf");
    assert!(
        path.exists(),
        "{} is missing: run `wgllm pull whisper-tiny.en`",
        path.display()
    );
    Arc::new(WhisperModel::open(&path).unwrap())
}

fn clip(name: &str) -> Audio {
    let p = fixtures().join("audio").join(name);
    let ext = p.extension().and_then(|e| e.to_str()).map(str::to_string);
    audio::decode(std::fs::read(&p).unwrap(), ext.as_deref(), None).unwrap()
}

/// Every `<clip>.json` fixture.
fn cases() -> Vec<Value> {
    let mut v: Vec<(String, Value)> = std::fs::read_dir(fixtures())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p.to_string_lossy().ends_with("_mel.json")
        })
        .map(|p| {
            (
                p.display().to_string(),
                serde_json::from_str::<Value>(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            )
        })
        // The clips' fixtures (the others hold a spectrogram, or synthetic models' results).
        .filter(|(name, j)| j.get("segments").is_some() && !name.contains("synthetic"))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 5, "fixtures missing in {}", fixtures().display());
    v.into_iter().map(|(_, j)| j).collect()
}

/// whisper-cli's flags in the fixtures: greedy, one candidate at each fallback temperature.
fn opts() -> DecodeOptions {
    DecodeOptions {
        best_of: 1,
        ..DecodeOptions::default()
    }
}

/// The cues of an SRT or VTT file: (start ms, end ms, text).
fn cues(s: &str) -> Vec<(i64, i64, String)> {
    let ms = |t: &str| -> i64 {
        let t = t.trim().replace(',', ".");
        let (hms, frac) = t.split_once('.').unwrap();
        let p: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
        ((p[0] * 60 + p[1]) * 60 + p[2]) * 1000 + frac.parse::<i64>().unwrap()
    };
    let lines: Vec<&str> = s.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some((a, b)) = l.split_once(" --> ") {
            out.push((
                ms(a),
                ms(b),
                lines.get(i + 1).unwrap_or(&"").trim().to_string(),
            ));
        }
    }
    out
}

/// Whether two subtitle files have the same cues, times within 20 ms.
fn same_cues(ours: &str, theirs: &str) -> Result<(), String> {
    let (a, b) = (cues(ours), cues(theirs));
    if a.len() != b.len() || b.is_empty() {
        return Err(format!("{} cues, whisper.cpp {}", a.len(), b.len()));
    }
    for (x, y) in a.iter().zip(&b) {
        if x.2 != y.2 || (x.0 - y.0).abs() > 20 || (x.1 - y.1).abs() > 20 {
            return Err(format!("cue {x:?}, whisper.cpp {y:?}"));
        }
    }
    Ok(())
}

fn check(backend: &dyn Backend) {
    let mut t = Transcriber::new(model(), backend).unwrap();
    let mut failures = Vec::new();
    for case in cases() {
        let name = case["clip"].as_str().unwrap();
        let tr = t.transcribe(&clip(name), &opts(), |_| {}).unwrap();
        let want = case["segments"].as_array().unwrap();
        let got: Vec<Vec<u32>> = tr.segments.iter().map(|s| s.tokens.clone()).collect();
        let want_ids: Vec<Vec<u32>> = want
            .iter()
            .map(|s| {
                s["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect();
        if got != want_ids {
            failures.push(format!(
                "{name}: tokens\n  got  {got:?}\n  want {want_ids:?}"
            ));
            continue;
        }
        if tr.text() != case["text"].as_str().unwrap() {
            failures.push(format!(
                "{name}: text {:?}, whisper.cpp {:?}",
                tr.text(),
                case["text"]
            ));
        }
        for (i, (g, w)) in tr.segments.iter().zip(want).enumerate() {
            let (t0, t1) = (w["t0_ms"].as_i64().unwrap(), w["t1_ms"].as_i64().unwrap());
            if (g.t0 * 10 - t0).abs() > 20 || (g.t1 * 10 - t1).abs() > 20 {
                failures.push(format!(
                    "{name} segment {i}: {}..{} ms, whisper.cpp {t0}..{t1}",
                    g.t0 * 10,
                    g.t1 * 10
                ));
            }
        }
        // The subtitles: whisper.cpp's cues, times within 20 ms.
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        for (ext, fmt) in [("srt", Format::Srt), ("vtt", Format::Vtt)] {
            let theirs = std::fs::read_to_string(fixtures().join(format!("{stem}.{ext}"))).unwrap();
            let ours = format::write(&tr, fmt, "transcribe", 0.0);
            if let Err(e) = same_cues(&ours, &theirs) {
                failures.push(format!("{name}: {ext}: {e}"));
            }
        }
        println!(
            "{name}: {} segments and their cues equal to whisper.cpp's",
            tr.segments.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs the Whisper tiny.en checkpoint (wgllm pull whisper-tiny.en)"]
fn whisper_tiny_en_matches_whisper_cpp_on_the_cpu() {
    check(&CpuBackend);
}

#[test]
#[ignore = "needs the Whisper tiny.en checkpoint (wgllm pull whisper-tiny.en)"]
fn whisper_tiny_en_matches_whisper_cpp_on_webgpu() {
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    println!("adapter: {}", gpu.adapter().name);
    check(&gpu);
}

#[test]
#[ignore = "needs the Whisper tiny.en checkpoint (wgllm pull whisper-tiny.en)"]
fn other_containers_transcribe_like_the_wav() {
    let wav = clip("jfk.wav");
    // FLAC is lossless: the same samples.
    assert_eq!(clip("jfk.flac").samples, wav.samples);
    let mut t = Transcriber::new(model(), &CpuBackend).unwrap();
    let want = t.transcribe(&wav, &opts(), |_| {}).unwrap().text();
    for name in ["jfk.mp3", "jfk.ogg"] {
        let a = clip(name);
        assert!(
            (a.seconds() - wav.seconds()).abs() < 0.1,
            "{name}: {} s",
            a.seconds()
        );
        let got = t.transcribe(&a, &opts(), |_| {}).unwrap().text();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn the_log_mel_spectrogram_is_whisper_cpps() {
    let path = fixtures().join("jfk_mel.json");
    let f: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let filters = wgllm_speech::mel::MelFilters::slaney(80);
    let mel = wgllm_speech::mel::log_mel(&clip("jfk.wav").samples, &filters);
    assert_eq!(mel.n_len as u64, f["n_len"].as_u64().unwrap());
    assert_eq!(mel.n_audio as u64, f["n_len_org"].as_u64().unwrap());
    let mut worst = 0f64;
    let mut n = 0;
    // Ranges of frames (the start, and around the end of the audio), each [bin][frame].
    for r in f["ranges"].as_array().unwrap() {
        let start = r["start"].as_u64().unwrap() as usize;
        for (m, row) in r["mel"].as_array().unwrap().iter().enumerate() {
            for (i, v) in row.as_array().unwrap().iter().enumerate() {
                let got = f64::from(mel.data[m * mel.n_len + start + i]);
                worst = worst.max((got - v.as_f64().unwrap()).abs());
                n += 1;
            }
        }
    }
    assert!(n >= 80 * 100, "{n} values compared");
    // The fixture rounds to 5 decimals; whisper.cpp's FFT uses its own sine table.
    assert!(worst < 1e-3, "worst difference {worst} over {n} values");
}
