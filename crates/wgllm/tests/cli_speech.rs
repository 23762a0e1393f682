//! Runs `wgllm transcribe`, `convert` and `bench` on a Whisper model as a user would: a synthetic
//! multilingual Whisper and a WAV written here; bad input gives one `error:` line and a non-zero
//! exit.

mod common;

use common::{assert_one_error_line, text, tiny, wgllm, Scratch};
use serde_json::Value;

fn whisper(s: &Scratch) -> String {
    let path = s.path("whisper.gguf");
    let o = wgllm(
        &[
            "synth",
            "--preset",
            "whisper-test",
            "--dtype",
            "f32",
            "-o",
            &path,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    path
}

/// 2 s of a 16-bit stereo WAV at 22.05 kHz (the command mixes and resamples it).
fn wav(s: &Scratch) -> String {
    let (rate, n) = (22_050u32, 44_100u32);
    let mut v = Vec::new();
    v.extend_from_slice(b"RIFF");
    v.extend_from_slice(&(36 + 4 * n).to_le_bytes());
    v.extend_from_slice(b"WAVEfmt ");
    for x in [
        16u32.to_le_bytes(),
        [1, 0, 2, 0],
        rate.to_le_bytes(),
        (rate * 4).to_le_bytes(),
        [4, 0, 16, 0],
    ] {
        v.extend_from_slice(&x);
    }
    v.extend_from_slice(b"data");
    v.extend_from_slice(&(4 * n).to_le_bytes());
    for i in 0..n {
        let x =
            ((2.0 * std::f32::consts::PI * 330.0 * i as f32 / rate as f32).sin() * 9000.0) as i16;
        v.extend_from_slice(&x.to_le_bytes());
        v.extend_from_slice(&(x / 2).to_le_bytes());
    }
    let path = s.path("clip.wav");
    std::fs::write(&path, v).unwrap();
    path
}

#[test]
fn transcribe_writes_each_format() {
    let s = Scratch::new("transcribe");
    let (m, clip) = (whisper(&s), wav(&s));
    let run = |extra: &[&str]| {
        let mut a = vec![
            "transcribe",
            "-m",
            &m,
            &clip,
            "--no-fallback",
            "--backend",
            "cpu",
            "-l",
            "en",
        ];
        a.extend_from_slice(extra);
        let o = wgllm(&a, &[]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("real-time factor"),
            "{}",
            text(&o.stderr)
        );
        text(&o.stdout)
    };
    let json: Value = serde_json::from_str(&run(&["-o", "json"])).unwrap();
    assert_eq!(json["language"], "english");
    assert_eq!(json["duration"], 2.0);
    let segs = json["segments"].as_array().unwrap();
    let srt = run(&["-o", "srt"]);
    assert_eq!(srt.matches(" --> ").count(), segs.len(), "{srt}");
    let vtt = run(&["-o", "vtt"]);
    assert!(vtt.starts_with("WEBVTT\n\n"), "{vtt}");
    let txt = run(&[]);
    assert_eq!(txt.lines().count(), segs.len().max(1), "{txt}");
    // --output-dir writes <stem>.<format>.
    let dir = s.path("subs");
    run(&["-o", "srt", "--output-dir", &dir]);
    assert_eq!(
        std::fs::read_to_string(format!("{dir}/clip.srt")).unwrap(),
        srt
    );

    // Back to whisper.cpp's format and read from it: the same transcript.
    let bin = s.path("ggml-test.bin");
    let o = wgllm(&["convert", &m, "-o", &bin], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = wgllm(
        &[
            "transcribe",
            "-m",
            &bin,
            &clip,
            "--no-fallback",
            "--backend",
            "cpu",
            "-l",
            "en",
            "-o",
            "srt",
        ],
        &[],
    );
    assert_eq!(text(&o.stdout), srt, "{}", text(&o.stderr));

    // bench: the encoder row and the transcription row.
    let o = wgllm(
        &[
            "bench",
            "-m",
            &m,
            "--backend",
            "cpu",
            "-r",
            "1",
            "-o",
            "json",
            "--audio",
            &clip,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let b: Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    assert!(b["encode_ms"]["mean"].as_f64().unwrap() > 0.0, "{b}");
    assert_eq!(b["transcribe_s"]["audio_s"], 2.0);
}

#[test]
fn bad_input_is_one_error_line() {
    let s = Scratch::new("transcribe-bad");
    let (m, clip) = (whisper(&s), wav(&s));
    let notes = s.path("notes.txt");
    std::fs::write(&notes, "not audio").unwrap();
    let o = wgllm(&["transcribe", "-m", &m, &notes, "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "not an audio file");
    let o = wgllm(
        &[
            "transcribe",
            "-m",
            &m,
            &clip,
            "--language",
            "xx",
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert_one_error_line(&o, "unknown language 'xx'");
    let text_model = tiny(&s);
    let o = wgllm(
        &["transcribe", "-m", &text_model, &clip, "--backend", "cpu"],
        &[],
    );
    assert_one_error_line(&o, "not a Whisper model");
    let o = wgllm(
        &[
            "transcribe",
            "-m",
            &m,
            &s.path("missing.wav"),
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert_one_error_line(&o, "missing.wav");
}
