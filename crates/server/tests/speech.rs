//! The speech server on loopback over a synthetic multilingual Whisper on the CPU backend:
//! OpenAI's multipart form and response formats, the transcript the transcriber itself gives,
//! and every kind of bad input answered with a 4xx naming the cause while the server keeps
//! serving.

mod loopback;

use std::sync::Arc;

use reqwest::multipart::{Form, Part};
use serde_json::Value;
use tokio::sync::oneshot;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_server::speech::{SpeechApp, SpeechServerConfig};
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::synth::{preset, whisper_gguf};
use wgllm_speech::{audio, Transcriber, WhisperModel};

fn model() -> WhisperModel {
    let c = preset("whisper-test").unwrap();
    let bytes = whisper_gguf(&c, DType::F16, 5).unwrap();
    WhisperModel::from_gguf(GgufFile::from_bytes(bytes.into()).unwrap()).unwrap()
}

/// A 16-bit mono WAV of `seconds` of a tone at 16 kHz.
fn wav(seconds: f32) -> Vec<u8> {
    let n = (seconds * 16_000.0) as u32;
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
        let s = (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 16_000.0).sin() * 8000.0;
        v.extend_from_slice(&(s as i16).to_le_bytes());
    }
    v
}

async fn start() -> (String, oneshot::Sender<()>) {
    let cfg = SpeechServerConfig {
        model_id: "whisper-test".into(),
        queue: 4,
        max_body_bytes: 1 << 20,
        max_audio_seconds: 5.0,
    };
    let backend =
        Box::new(|| -> anyhow::Result<Box<dyn wgllm_core::Backend>> { Ok(Box::new(CpuBackend)) });
    let app = SpeechApp::start(backend, model(), cfg).unwrap();
    loopback::serve(app).await
}

/// Posts a form with `file` (named `name`) and the text fields; the status, content type, body.
async fn send(
    base: &str,
    path: &str,
    file: Option<(&str, Vec<u8>)>,
    fields: &[(&str, &str)],
) -> (u16, String, String) {
    try_send(base, path, file, fields).await.unwrap()
}

/// `send`, with the transport error returned rather than unwrapped.
async fn try_send(
    base: &str,
    path: &str,
    file: Option<(&str, Vec<u8>)>,
    fields: &[(&str, &str)],
) -> reqwest::Result<(u16, String, String)> {
    let mut form = Form::new();
    if let Some((name, bytes)) = file {
        form = form.part("file", Part::bytes(bytes).file_name(name.to_string()));
    }
    for (k, v) in fields {
        form = form.text(k.to_string(), v.to_string());
    }
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .multipart(form)
        .send()
        .await?;
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    Ok((status, ct, r.text().await?))
}

fn error_of(body: &str) -> (Value, String) {
    let v: Value = serde_json::from_str(body).unwrap();
    let e = &v["error"];
    (
        e["param"].clone(),
        e["message"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcriptions_answer_in_openai_formats() {
    let (base, _stop) = start().await;
    let clip = wav(2.0);
    // What the transcriber gives for the same audio.
    let want = {
        let mut t = Transcriber::new(Arc::new(model()), &CpuBackend).unwrap();
        let a = audio::decode(clip.clone(), Some("wav"), None).unwrap();
        t.transcribe(&a, &DecodeOptions::default(), |_| {}).unwrap()
    };

    let (s, ct, body) = send(
        &base,
        "/v1/audio/transcriptions",
        Some(("a.wav", clip.clone())),
        &[("model", "whisper-1")],
    )
    .await;
    assert_eq!((s, ct.as_str()), (200, "application/json"), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["text"], want.text().trim());

    let (s, _, body) = send(
        &base,
        "/v1/audio/transcriptions",
        Some(("a.wav", clip.clone())),
        &[
            ("response_format", "verbose_json"),
            ("timestamp_granularities[]", "segment"),
        ],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["task"], "transcribe");
    assert_eq!(v["duration"], 2.0);
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(segs.len(), want.segments.len());
    for (g, w) in segs.iter().zip(&want.segments) {
        let toks: Vec<u32> = g["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(toks, w.tokens);
        assert_eq!(g["start"].as_f64().unwrap(), w.t0 as f64 / 100.0);
    }

    for (fmt, ct_want, starts) in [
        ("srt", "text/plain; charset=utf-8", ""),
        ("vtt", "text/vtt; charset=utf-8", "WEBVTT"),
    ] {
        let (s, ct, body) = send(
            &base,
            "/v1/audio/transcriptions",
            Some(("a.wav", clip.clone())),
            &[("response_format", fmt)],
        )
        .await;
        assert_eq!((s, ct.as_str()), (200, ct_want), "{fmt}: {body}");
        assert!(body.starts_with(starts), "{fmt}: {body}");
        assert_eq!(
            body.matches("-->").count(),
            want.segments.len(),
            "{fmt}: {body}"
        );
    }
    // A multilingual model translates; the language may be given.
    let (s, _, body) = send(
        &base,
        "/v1/audio/translations",
        Some(("a.wav", clip.clone())),
        &[("response_format", "verbose_json")],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["task"],
        "translate"
    );
    let (s, _, body) = send(
        &base,
        "/v1/audio/transcriptions",
        Some(("a.wav", clip)),
        &[("language", "de"), ("response_format", "verbose_json")],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["language"],
        "german"
    );
}

/// A bad request: its file, fields, and the status, `param` and message part it must get.
type Case<'a> = (
    Option<(&'a str, Vec<u8>)>,
    Vec<(&'a str, &'a str)>,
    u16,
    &'a str,
    &'a str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_the_server_keeps_serving() {
    let (base, _stop) = start().await;
    let t = "/v1/audio/transcriptions";
    let cases: Vec<Case> = vec![
        (
            Some(("notes.txt", b"hello, this is text".to_vec())),
            vec![],
            400,
            "file",
            "not an audio file",
        ),
        (
            Some(("empty.wav", Vec::new())),
            vec![],
            400,
            "file",
            "empty",
        ),
        (
            Some(("long.wav", wav(6.0))),
            vec![],
            400,
            "file",
            "longer than the limit of 5 s",
        ),
        (
            None,
            vec![("model", "whisper-test")],
            400,
            "file",
            "is required",
        ),
        (
            Some(("a.wav", wav(1.0))),
            vec![("response_format", "mp4")],
            400,
            "response_format",
            "must be one of",
        ),
        (
            Some(("a.wav", wav(1.0))),
            vec![("language", "xx")],
            400,
            "language",
            "not a language code",
        ),
        (
            Some(("a.wav", wav(1.0))),
            vec![("temperature", "hot")],
            400,
            "temperature",
            "must be a number",
        ),
        (
            Some(("a.wav", wav(1.0))),
            vec![("timestamp_granularities[]", "word")],
            400,
            "timestamp_granularities[]",
            "per segment",
        ),
        (
            Some(("a.wav", wav(1.0))),
            vec![("model", "gpt-4")],
            404,
            "model",
            "does not exist",
        ),
        (
            Some(("a.wav", wav(1.0))),
            vec![("speed", "2")],
            400,
            "speed",
            "not a field",
        ),
    ];
    for (file, fields, status, param, msg) in cases {
        let (s, _, body) = send(&base, t, file, &fields).await;
        assert_eq!(s, status, "{fields:?}: {body}");
        let (p, m) = error_of(&body);
        assert_eq!(p, param, "{body}");
        assert!(m.contains(msg), "{m}");
    }
    // Not a form (declared or not); larger than the body limit.
    let r = reqwest::Client::new()
        .post(format!("{base}{t}"))
        .header("content-type", "multipart/form-data; boundary=x")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = reqwest::Client::new()
        .post(format!("{base}{t}"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    // The server may answer 413 and close while the client is still writing the body, which
    // the client can report as a broken pipe: a few tries, and the answer must be 413.
    let mut answer = None;
    for _ in 0..5 {
        let big = Some(("big.wav", vec![0u8; (1 << 20) + (16 << 10)]));
        if let Ok((s, _, _)) = try_send(&base, t, big, &[]).await {
            answer = Some(s);
            break;
        }
    }
    assert_eq!(answer, Some(413));
    // Text routes name the model's kind.
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("Whisper speech model"));
    // And it still transcribes.
    let (s, _, body) = send(&base, t, Some(("a.wav", wav(1.0))), &[]).await;
    assert_eq!(s, 200, "{body}");
    let health = reqwest::get(format!("{base}/health")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
}
