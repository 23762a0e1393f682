//! The server of a Whisper model: `POST /v1/audio/transcriptions` and
//! `POST /v1/audio/translations` in OpenAI's multipart form (`file`, `model`, `language`,
//! `prompt`, `response_format` json | text | srt | verbose_json | vtt, `temperature`,
//! `timestamp_granularities[]` segment), `GET /v1/models`, `/health` and `/metrics`; the text
//! and embedding routes answer 400 naming the model's kind.
//!
//! The form is checked and the audio decoded in the handler (a file that is not audio, empty,
//! or longer than the limit is a 400 that never reaches the model). One thread owns the model
//! and transcribes one request at a time; at most `queue` wait, beyond that the answer is 503.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use wgllm_core::Backend;
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::format::{self, Format};
use wgllm_speech::{audio, lang, Audio, Transcriber, Transcript, WhisperModel};

use crate::error::ApiError;
use crate::shared::Running;

/// How the speech server runs.
#[derive(Clone, Debug)]
pub struct SpeechServerConfig {
    /// The name `/v1/models` lists and requests may give as `model`.
    pub model_id: String,
    /// Requests that may wait while the model is busy (beyond that: 503).
    pub queue: usize,
    /// Largest request body in bytes (beyond that: 413).
    pub max_body_bytes: usize,
    /// Longest audio accepted, in seconds.
    pub max_audio_seconds: f64,
}

/// One request, queued for the model thread.
struct Job {
    audio: Audio,
    opts: DecodeOptions,
    reply: oneshot::Sender<Result<Transcript, String>>,
}

/// Counters `/metrics` shows.
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    rejected: AtomicU64,
    /// Centiseconds of audio transcribed.
    audio_cs: AtomicU64,
}

/// The state the handlers share.
pub struct SpeechApp {
    pub(crate) cfg: SpeechServerConfig,
    jobs: Mutex<Option<SyncSender<Job>>>,
    multilingual: bool,
    n_languages: usize,
    counters: Counters,
    /// The model thread is running (cleared when it ends, however it ends).
    alive: Arc<AtomicBool>,
    started: u64,
}

impl SpeechApp {
    /// Starts the model thread over `model` on the backend `backend` opens (on that thread).
    pub fn start(
        backend: Box<dyn FnOnce() -> anyhow::Result<Box<dyn Backend>> + Send>,
        model: WhisperModel,
        cfg: SpeechServerConfig,
    ) -> anyhow::Result<Arc<SpeechApp>> {
        let (multilingual, n_languages) = (model.vocab.multilingual, model.vocab.n_languages);
        let (tx, rx) = sync_channel::<Job>(cfg.queue.max(1));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let alive = Arc::new(AtomicBool::new(true));
        let running = Running(alive.clone());
        std::thread::Builder::new()
            .name("wgllm-speech".into())
            .spawn(move || {
                let _running = running;
                let t = backend().and_then(|b| Ok(Transcriber::new(Arc::new(model), b.as_ref())?));
                match t {
                    Ok(t) => {
                        let _ = ready_tx.send(Ok(()));
                        model_loop(t, rx);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                    }
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the model thread ended before it was ready"))?
            .map_err(anyhow::Error::msg)?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Arc::new(SpeechApp {
            cfg,
            jobs: Mutex::new(Some(tx)),
            multilingual,
            n_languages,
            counters: Counters::default(),
            alive,
            started,
        }))
    }

    /// Stops taking requests; those queued are still answered.
    pub fn close(&self) {
        if let Ok(mut j) = self.jobs.lock() {
            j.take();
        }
    }
}

/// The model thread: one request at a time.
fn model_loop(mut t: Transcriber, rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        let r = t
            .transcribe(&job.audio, &job.opts, |_| {})
            .map_err(|e| e.to_string());
        let _ = job.reply.send(r);
    }
}

/// Every route of the speech server, with the body limit.
pub fn router(app: Arc<SpeechApp>) -> Router {
    let limit = app.cfg.max_body_bytes;
    Router::new()
        .route("/v1/audio/transcriptions", post(transcriptions))
        .route("/v1/audio/translations", post(translations))
        .route("/v1/chat/completions", post(not_text))
        .route("/v1/completions", post(not_text))
        .route("/v1/embeddings", post(not_text))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(crate::shared::not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

async fn not_text(State(app): State<Arc<SpeechApp>>) -> ApiError {
    ApiError::bad_param(
        "model",
        format!(
            "The model '{}' is a Whisper speech model: it serves POST /v1/audio/transcriptions and /v1/audio/translations, not text generation or embeddings",
            app.cfg.model_id
        ),
    )
    .with_code("model_not_supported")
}

async fn models(State(app): State<Arc<SpeechApp>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.cfg.model_id,
            "object": "model",
            "created": app.started,
            "owned_by": "wgllm",
            "meta": {"kind": "speech", "multilingual": app.multilingual},
        }],
    }))
}

async fn health(State(app): State<Arc<SpeechApp>>) -> Response {
    let alive = app.alive.load(Ordering::Relaxed) && app.jobs.lock().is_ok_and(|j| j.is_some());
    crate::shared::health(
        alive,
        "the model thread has stopped or the server is shutting down",
    )
}

async fn metrics(State(app): State<Arc<SpeechApp>>) -> Response {
    let c = &app.counters;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    crate::shared::counters(
        "speech",
        &[
            (
                "requests_total",
                "Speech requests answered or refused.",
                n(&c.requests),
            ),
            (
                "requests_rejected_total",
                "Requests refused (bad input, full queue).",
                n(&c.rejected),
            ),
            (
                "audio_seconds_total",
                "Seconds of audio transcribed.",
                n(&c.audio_cs) / 100.0,
            ),
        ],
    )
}

async fn transcriptions(
    State(app): State<Arc<SpeechApp>>,
    form: Result<Multipart, MultipartRejection>,
) -> Response {
    respond(&app, form, false).await
}

async fn translations(
    State(app): State<Arc<SpeechApp>>,
    form: Result<Multipart, MultipartRejection>,
) -> Response {
    respond(&app, form, true).await
}

async fn respond(
    app: &Arc<SpeechApp>,
    form: Result<Multipart, MultipartRejection>,
    translate: bool,
) -> Response {
    app.counters.requests.fetch_add(1, Ordering::Relaxed);
    match answer(app, form, translate).await {
        Ok(r) => r,
        Err(e) => {
            app.counters.rejected.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

/// A checked request.
struct Request {
    file: Vec<u8>,
    ext: Option<String>,
    format: Format,
    opts: DecodeOptions,
}

/// Reads and checks the form field by field.
async fn read_form(
    app: &SpeechApp,
    mut form: Multipart,
    translate: bool,
) -> Result<Request, ApiError> {
    let limit = app.cfg.max_body_bytes;
    let unread = |e: axum::extract::multipart::MultipartError| {
        let status = e.status();
        ApiError {
            status,
            message: if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("The body is larger than the limit of {limit} bytes")
            } else {
                format!("The form could not be read: {}", e.body_text())
            },
            ..ApiError::bad_request("")
        }
    };
    let mut file = None;
    let mut ext = None;
    let mut opts = DecodeOptions {
        translate,
        ..DecodeOptions::default()
    };
    let mut format = Format::Json;
    while let Some(field) = form.next_field().await.map_err(unread)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            ext = field.file_name().and_then(|n| {
                std::path::Path::new(n)
                    .extension()
                    .map(|e| e.to_string_lossy().to_lowercase())
            });
            file = Some(field.bytes().await.map_err(unread)?.to_vec());
            continue;
        }
        let value = field.text().await.map_err(unread)?;
        let bad = |m: String| ApiError::bad_param(&name, m);
        match name.as_str() {
            "model" => {
                if value != app.cfg.model_id && value != "whisper-1" {
                    return Err(ApiError::unknown_model(&value, &app.cfg.model_id));
                }
            }
            "language" if !translate => {
                let l = lang::find(&value).ok_or_else(|| {
                    bad(format!(
                        "'{value}' is not a language code (ISO-639-1, such as en, de, fr)"
                    ))
                })?;
                if !app.multilingual && l != 0 {
                    return Err(bad(format!(
                        "the model '{}' is English-only",
                        app.cfg.model_id
                    )));
                }
                if l >= app.n_languages.max(1) {
                    return Err(bad(format!(
                        "the model '{}' does not know '{value}'",
                        app.cfg.model_id
                    )));
                }
                opts.language = Some(l);
            }
            "prompt" => opts.initial_prompt = Some(value),
            "response_format" => {
                format = Format::parse(&value).ok_or_else(|| {
                    bad("must be one of json, text, srt, verbose_json, vtt".into())
                })?;
            }
            "temperature" => {
                let t: f32 = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("must be a number".into()))?;
                if !(0.0..=1.0).contains(&t) {
                    return Err(bad("must be between 0 and 1".into()));
                }
                opts.temperature = t;
            }
            "timestamp_granularities[]" | "timestamp_granularities" => {
                if value != "segment" {
                    return Err(bad(format!(
                        "'{value}' is not available: timestamps are per segment"
                    )));
                }
            }
            // Accepted and not needed: streaming is not offered, chunking is whisper's own.
            "stream" if value == "false" => {}
            other => {
                return Err(ApiError::bad_param(
                    other,
                    format!("'{other}' is not a field of this request"),
                ))
            }
        }
    }
    if translate && !app.multilingual {
        return Err(ApiError::bad_param(
            "model",
            format!(
                "The model '{}' is English-only: translation needs a multilingual one",
                app.cfg.model_id
            ),
        ));
    }
    let file = file.ok_or_else(|| {
        ApiError::bad_param(
            "file",
            "is required (the audio file, as a multipart file field)",
        )
    })?;
    Ok(Request {
        file,
        ext,
        format,
        opts,
    })
}

async fn answer(
    app: &Arc<SpeechApp>,
    form: Result<Multipart, MultipartRejection>,
    translate: bool,
) -> Result<Response, ApiError> {
    let form = form.map_err(|r| ApiError {
        status: r.status(),
        message: format!("The body must be a multipart form: {}", r.body_text()),
        ..ApiError::bad_request("")
    })?;
    let req = read_form(app, form, translate).await?;
    let max = app.cfg.max_audio_seconds;
    let ext = req.ext.clone();
    // Decoding and resampling is CPU work: off the async workers.
    let audio =
        tokio::task::spawn_blocking(move || audio::decode(req.file, ext.as_deref(), Some(max)))
            .await
            .map_err(|e| ApiError::internal(format!("decoding the audio: {e}")))?
            .map_err(|e| ApiError::bad_param("file", e.to_string()))?;
    let duration = audio.seconds();
    let (reply, wait) = oneshot::channel();
    let sent = match app.jobs.lock() {
        Ok(j) => match j.as_ref() {
            Some(tx) => tx.try_send(Job {
                audio,
                opts: req.opts,
                reply,
            }),
            None => return Err(ApiError::shutting_down()),
        },
        Err(_) => return Err(ApiError::internal("the request queue is poisoned")),
    };
    match sent {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => return Err(ApiError::overloaded(app.cfg.queue)),
        Err(TrySendError::Disconnected(_)) => return Err(ApiError::shutting_down()),
    }
    let tr = wait
        .await
        .map_err(|_| ApiError::internal("the model thread stopped"))?
        .map_err(ApiError::internal)?;
    app.counters
        .audio_cs
        .fetch_add((duration * 100.0) as u64, Ordering::Relaxed);
    let task = if translate { "translate" } else { "transcribe" };
    let body = format::write(&tr, req.format, task, duration);
    Ok(([(header::CONTENT_TYPE, req.format.content_type())], body).into_response())
}
