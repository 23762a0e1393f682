//! The server of an embedding model: `POST /v1/embeddings` in OpenAI's format (`input` a string,
//! an array of strings, of token ids, or of token-id arrays; `encoding_format` float or base64;
//! `dimensions` as the model gives them), `GET /v1/models`, `/health` and `/metrics`; the text
//! generation routes answer 400 naming the model's kind.
//!
//! Requests are tokenized and checked in the handler (bad input is a 400 naming the field, and
//! never reaches the model). One thread owns the model: it takes a request, merges every other
//! request waiting into the same batches (an [`Embedder`] sorts and packs their inputs), and
//! answers each. At most `queue` requests wait; beyond that the answer is 503.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use wgllm_core::Backend;
use wgllm_gguf::GgufFile;
use wgllm_models::arch::bert::Pooling;
use wgllm_models::arch::EmbeddingArch;
use wgllm_models::{EmbedConfig, Embedder, Truncate};

use crate::error::ApiError;
use crate::shared::Running;

/// Inputs one request may carry (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// Most inputs merged into one pass of the model thread.
const MERGE_INPUTS: usize = 4096;

/// How the embedding server runs.
#[derive(Clone, Debug)]
pub struct EmbedServerConfig {
    /// The name `/v1/models` lists and requests may give as `model`.
    pub model_id: String,
    /// Requests that may wait while the model is busy (beyond that: 503).
    pub queue: usize,
    /// Largest request body in bytes (beyond that: 413).
    pub max_body_bytes: usize,
    /// How the model batches.
    pub embed: EmbedConfig,
}

/// One request's inputs, queued for the model thread.
struct Job {
    inputs: Vec<Vec<u32>>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// Counters `/metrics` shows.
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    rejected: AtomicU64,
    inputs: AtomicU64,
    tokens: AtomicU64,
    passes: AtomicU64,
}

/// The state the handlers share.
pub struct EmbedApp {
    pub(crate) cfg: EmbedServerConfig,
    jobs: Mutex<Option<SyncSender<Job>>>,
    tokenizer: wgllm_models::tokenizer::Tokenizer,
    arch: EmbeddingArch,
    pooling: Pooling,
    max_tokens: usize,
    counters: Arc<Counters>,
    /// The model thread is running (cleared when it ends, however it ends).
    alive: Arc<AtomicBool>,
    started: u64,
}

impl EmbedApp {
    /// Starts the model thread over `file` on the backend `backend` opens (on that thread).
    pub fn start(
        backend: Box<dyn FnOnce() -> anyhow::Result<Box<dyn Backend>> + Send>,
        file: GgufFile,
        cfg: EmbedServerConfig,
    ) -> anyhow::Result<Arc<EmbedApp>> {
        let arch = EmbeddingArch::from_gguf(&file)?;
        let tokenizer = wgllm_models::tokenizer::Tokenizer::from_gguf(&file)?;
        let pooling = cfg.embed.pooling.unwrap_or(arch.pooling());
        let max_tokens = (arch.n_ctx_train() as usize).min(cfg.embed.batch_tokens as usize);
        let (tx, rx) = sync_channel::<Job>(cfg.queue.max(1));
        let counters = Arc::new(Counters::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let embed_cfg = cfg.embed;
        let c = counters.clone();
        let alive = Arc::new(AtomicBool::new(true));
        let running = Running(alive.clone());
        std::thread::Builder::new()
            .name("wgllm-embed".into())
            .spawn(move || {
                let _running = running;
                let backend = match backend() {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let prepared = Embedder::new(&file, embed_cfg).and_then(|mut e| {
                    e.prepare(backend.as_ref())?;
                    Ok(e)
                });
                let embedder = match prepared {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                model_loop(backend.as_ref(), embedder, rx, &c);
            })?;
        ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the model thread ended before it was ready"))?
            .map_err(anyhow::Error::msg)?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Arc::new(EmbedApp {
            cfg,
            jobs: Mutex::new(Some(tx)),
            tokenizer,
            arch,
            pooling,
            max_tokens,
            counters,
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

    /// Values in one embedding.
    pub fn dim(&self) -> usize {
        self.arch.n_embd() as usize
    }
}

/// The model thread: a request, then every other one waiting, in one call of the embedder.
fn model_loop(backend: &dyn Backend, mut embedder: Embedder, rx: Receiver<Job>, c: &Counters) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut n = jobs[0].inputs.len();
        while n < MERGE_INPUTS {
            match rx.try_recv() {
                Ok(j) => {
                    n += j.inputs.len();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        let counts: Vec<usize> = jobs.iter().map(|j| j.inputs.len()).collect();
        let all: Vec<Vec<u32>> = jobs
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.inputs))
            .collect();
        c.passes.fetch_add(1, Ordering::Relaxed);
        match embedder.embed_ids(backend, &all, true) {
            Ok(vecs) => {
                let mut vecs = vecs.into_iter();
                for (j, n) in jobs.into_iter().zip(counts) {
                    let _ = j.reply.send(Ok(vecs.by_ref().take(n).collect()));
                }
            }
            Err(e) => {
                for j in jobs {
                    let _ = j.reply.send(Err(e.to_string()));
                }
            }
        }
    }
}

/// Every route of the embedding server, with the body limit.
pub fn router(app: Arc<EmbedApp>) -> Router {
    let limit = app.cfg.max_body_bytes;
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/chat/completions", post(not_generating))
        .route("/v1/completions", post(not_generating))
        .route("/v1/audio/transcriptions", post(not_generating))
        .route("/v1/audio/translations", post(not_generating))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(crate::shared::not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

async fn not_generating(State(app): State<Arc<EmbedApp>>) -> ApiError {
    ApiError::bad_param(
        "model",
        format!(
            "The model '{}' is an embedding model: it serves POST /v1/embeddings, not text generation or speech",
            app.cfg.model_id
        ),
    )
    .with_code("model_not_supported")
}

async fn models(State(app): State<Arc<EmbedApp>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.cfg.model_id,
            "object": "model",
            "created": app.started,
            "owned_by": "wgllm",
            "meta": {"n_embd": app.dim(), "n_ctx_train": app.arch.n_ctx_train(), "pooling": app.pooling.name()},
        }],
    }))
}

async fn health(State(app): State<Arc<EmbedApp>>) -> Response {
    let alive = app.alive.load(Ordering::Relaxed) && app.jobs.lock().is_ok_and(|j| j.is_some());
    crate::shared::health(
        alive,
        "the model thread has stopped or the server is shutting down",
    )
}

async fn metrics(State(app): State<Arc<EmbedApp>>) -> Response {
    let c = &app.counters;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    crate::shared::counters(
        "embed",
        &[
            (
                "requests_total",
                "Embedding requests answered or refused.",
                n(&c.requests),
            ),
            (
                "requests_rejected_total",
                "Requests refused (bad input, full queue).",
                n(&c.rejected),
            ),
            ("inputs_total", "Inputs embedded.", n(&c.inputs)),
            ("prompt_tokens_total", "Tokens embedded.", n(&c.tokens)),
            (
                "passes_total",
                "Passes of the model thread (each merges the requests waiting).",
                n(&c.passes),
            ),
        ],
    )
}

/// A checked request.
struct EmbedRequest {
    inputs: Vec<Vec<u32>>,
    base64: bool,
}

/// `input` as token-id arrays, tokenized and checked.
fn parse_inputs(
    app: &EmbedApp,
    input: &Value,
    truncate: Truncate,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let bad = |param: String, m: String| ApiError::bad_param(&param, m);
    let ids_of = |v: &Value, param: String| -> Result<Vec<u32>, ApiError> {
        let a = v.as_array().ok_or_else(|| {
            bad(
                param.clone(),
                "must be a string or an array of token ids".into(),
            )
        })?;
        a.iter()
            .map(|t| {
                t.as_u64()
                    .filter(|&t| t < app.arch.n_vocab())
                    .map(|t| t as u32)
                    .ok_or_else(|| {
                        bad(
                            param.clone(),
                            format!(
                                "{t} is not a token id of this model (0 to {})",
                                app.arch.n_vocab() - 1
                            ),
                        )
                    })
            })
            .collect()
    };
    let text_ids = |s: &str, param: String| -> Result<Vec<u32>, ApiError> {
        if s.is_empty() {
            return Err(bad(param, "must not be an empty string".into()));
        }
        app.tokenizer
            .encode_with(s, true, false)
            .map_err(|e| bad(param, format!("could not be tokenized: {e}")))
    };
    let items: Vec<(Vec<u32>, String)> = match input {
        Value::String(s) => vec![(text_ids(s, "input".into())?, "input".into())],
        Value::Array(a) if a.is_empty() => return Err(bad("input".into(), "must not be empty".into())),
        Value::Array(a) if a.iter().all(Value::is_number) => vec![(ids_of(input, "input".into())?, "input".into())],
        Value::Array(a) => {
            if a.len() > MAX_INPUTS {
                return Err(bad("input".into(), format!("has {} inputs; at most {MAX_INPUTS} are allowed", a.len())));
            }
            a.iter()
                .enumerate()
                .map(|(i, v)| {
                    let param = format!("input[{i}]");
                    let ids = match v {
                        Value::String(s) => text_ids(s, param.clone())?,
                        Value::Array(_) => ids_of(v, param.clone())?,
                        _ => return Err(bad(param, "must be a string or an array of token ids".into())),
                    };
                    Ok((ids, param))
                })
                .collect::<Result<_, _>>()?
        }
        _ => {
            return Err(bad(
                "input".into(),
                "must be a string, an array of strings, an array of token ids or an array of token-id arrays".into(),
            ))
        }
    };
    items
        .into_iter()
        .map(|(mut ids, param)| {
            if ids.is_empty() {
                return Err(bad(param, "must not be empty".into()));
            }
            if ids.len() > app.max_tokens {
                if truncate == Truncate::No {
                    return Err(bad(
                        param,
                        format!(
                            "has {} tokens; the model takes at most {} (send \"truncate\": true to cut it)",
                            ids.len(),
                            app.max_tokens
                        ),
                    )
                    .with_code("context_length_exceeded"));
                }
                wgllm_models::embed::cut(&mut ids, app.max_tokens, &app.tokenizer);
            }
            Ok(ids)
        })
        .collect()
}

/// Checks the body field by field.
fn parse(app: &EmbedApp, body: &[u8]) -> Result<EmbedRequest, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body is not valid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::bad_request("The body must be a JSON object"))?;
    if let Some(m) = obj.get("model") {
        let name = m
            .as_str()
            .ok_or_else(|| ApiError::bad_param("model", "must be a string"))?;
        if name != app.cfg.model_id {
            return Err(ApiError::unknown_model(name, &app.cfg.model_id));
        }
    }
    if app.pooling == Pooling::None {
        return Err(ApiError::bad_param(
            "model",
            format!(
                "The model '{}' pools nothing (pooling none): it gives a vector per token, which /v1/embeddings does not return",
                app.cfg.model_id
            ),
        ));
    }
    let base64 = match obj.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "float" => false,
        Some(Value::String(s)) if s == "base64" => true,
        Some(_) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                "must be \"float\" or \"base64\"",
            ))
        }
    };
    match obj.get("dimensions") {
        None | Some(Value::Null) => {}
        Some(d) if d.as_u64() == Some(app.dim() as u64) => {}
        Some(d) => {
            return Err(ApiError::bad_param(
                "dimensions",
                format!(
                    "{d} is not available: this model gives {} values",
                    app.dim()
                ),
            ))
        }
    }
    let truncate = match obj.get("truncate") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Truncate::No,
        Some(Value::Bool(true)) => Truncate::Yes,
        Some(_) => return Err(ApiError::bad_param("truncate", "must be a boolean")),
    };
    let input = obj
        .get("input")
        .ok_or_else(|| ApiError::bad_param("input", "is required"))?;
    Ok(EmbedRequest {
        inputs: parse_inputs(app, input, truncate)?,
        base64,
    })
}

/// A vector as OpenAI's base64: the little-endian f32 bytes.
fn base64_of(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn embeddings(
    State(app): State<Arc<EmbedApp>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.counters.requests.fetch_add(1, Ordering::Relaxed);
    match answer(&app, body).await {
        Ok(r) => r,
        Err(e) => {
            app.counters.rejected.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

async fn answer(
    app: &Arc<EmbedApp>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|r| ApiError::unread_body(&r, app.cfg.max_body_bytes))?;
    // Tokenizing up to MAX_INPUTS texts is CPU work: off the async workers.
    let parsing = app.clone();
    let req = tokio::task::spawn_blocking(move || parse(&parsing, &body))
        .await
        .map_err(|e| ApiError::internal(format!("parsing the request: {e}")))??;
    let n_tokens: usize = req.inputs.iter().map(Vec::len).sum();
    let n_inputs = req.inputs.len();
    let (reply, wait) = oneshot::channel();
    let sent = match app.jobs.lock() {
        Ok(j) => match j.as_ref() {
            Some(tx) => tx.try_send(Job {
                inputs: req.inputs,
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
    let vecs = wait
        .await
        .map_err(|_| ApiError::internal("the model thread stopped"))?
        .map_err(ApiError::internal)?;
    app.counters
        .inputs
        .fetch_add(n_inputs as u64, Ordering::Relaxed);
    app.counters
        .tokens
        .fetch_add(n_tokens as u64, Ordering::Relaxed);
    let data: Vec<Value> = vecs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = match req.base64 {
                true => json!(base64_of(v)),
                false => json!(v),
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": app.cfg.model_id,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response())
}
