//! The HTTP routes and OpenAI's response shapes: `chat.completion` / `text_completion` objects,
//! or with `stream: true` server-sent events of `chat.completion.chunk` / `text_completion`
//! chunks, the last with `finish_reason` and `usage` (or, with `stream_options.include_usage`,
//! followed by a chunk with only `usage`, as OpenAI sends it), then `data: [DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api::{self, Endpoint, ModelInfo, Request};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::scheduler::{Event, Finish, Job, TokenLogprob, Usage};
use crate::App;

/// Every route, with the body limit.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.cfg.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(no_embeddings))
        .route("/v1/audio/transcriptions", post(no_audio))
        .route("/v1/audio/translations", post(no_audio))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(crate::shared::not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(app, Endpoint::Chat, body).await
}

async fn completions(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(app, Endpoint::Completion, body).await
}

async fn no_embeddings(State(app): State<Arc<App>>) -> ApiError {
    ApiError::bad_param(
        "model",
        format!(
            "The model '{}' generates text: /v1/embeddings needs an embedding model (bert, Qwen3-Embedding...), served by `wgllm serve -m EMBEDDER`",
            app.cfg.model_id
        ),
    )
    .with_code("model_not_supported")
}

async fn no_audio(State(app): State<Arc<App>>) -> ApiError {
    ApiError::bad_param(
        "model",
        format!(
            "The model '{}' generates text: /v1/audio needs a Whisper model, served by `wgllm serve -m WHISPER`",
            app.cfg.model_id
        ),
    )
    .with_code("model_not_supported")
}

async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.cfg.model_id,
            "object": "model",
            "created": app.started,
            "owned_by": "wgllm",
            "meta": {"n_ctx_slot": app.cfg.n_ctx, "n_slots": app.metrics.slots_total.load(Ordering::Relaxed)},
        }],
    }))
}

async fn health(State(app): State<Arc<App>>) -> Response {
    crate::shared::health(app.engine.is_alive(), "the scheduler has stopped")
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.engine.metrics().render(),
    )
        .into_response()
}

/// Checks the request, queues it, and answers with JSON or a stream of events.
async fn generate(
    app: Arc<App>,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let n = app.counter.fetch_add(1, Ordering::Relaxed);
    let parsed = body
        .map_err(|r| ApiError::unread_body(&r, app.cfg.max_body_bytes))
        .and_then(|b| {
            let info = ModelInfo {
                id: &app.cfg.model_id,
                tokenizer: &app.tokenizer,
                n_ctx: app.cfg.n_ctx,
            };
            api::parse(endpoint, &b, &info, n)
        });
    let req = match parsed {
        Ok(r) => r,
        Err(e) => {
            Metrics::inc(&app.metrics.rejected_bad);
            return e.into_response();
        }
    };
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: req.prompt.clone(),
        params: req.params.clone(),
        events: tx,
    };
    if let Err(e) = app.engine.submit(job) {
        return e.into_response();
    }
    let reply = Reply {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{n:x}"),
            Endpoint::Completion => format!("cmpl-{n:x}"),
        },
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: app.cfg.model_id.clone(),
        req,
    };
    if reply.req.params.stream {
        stream(reply, rx).into_response()
    } else {
        collect(reply, rx).await
    }
}

/// What every object of one response repeats.
struct Reply {
    id: String,
    created: u64,
    model: String,
    req: Request,
}

impl Reply {
    fn chat(&self) -> bool {
        self.req.endpoint == Endpoint::Chat
    }

    /// A response object with `choices` and `usage`.
    fn object(&self, kind: &str, choices: Value, usage: Option<Usage>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = json!({
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.prompt_tokens + u.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            });
        }
        v
    }

    /// The `logprobs` value of a choice (`null` when not asked for).
    fn logprobs(&self, lps: &[TokenLogprob], text_offset: usize) -> Value {
        if self.req.params.logprobs.is_none() {
            return Value::Null;
        }
        if self.chat() {
            let entry = |t: &str, b: &[u8], lp: f32| json!({"token": t, "logprob": lp, "bytes": b});
            let content: Vec<Value> = lps
                .iter()
                .map(|l| {
                    let mut e = entry(&l.token, &l.bytes, l.logprob);
                    e["top_logprobs"] = l.top.iter().map(|(t, b, lp)| entry(t, b, *lp)).collect();
                    e
                })
                .collect();
            json!({ "content": content })
        } else {
            let mut offset = text_offset;
            let offsets: Vec<usize> = lps
                .iter()
                .map(|l| {
                    let o = offset;
                    offset += l.token.len();
                    o
                })
                .collect();
            json!({
                "tokens": lps.iter().map(|l| l.token.clone()).collect::<Vec<_>>(),
                "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
                "top_logprobs": lps.iter().map(|l| {
                    l.top.iter().map(|(t, _, lp)| (t.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()
                }).collect::<Vec<_>>(),
                "text_offset": offsets,
            })
        }
    }

    /// One streamed chunk: `delta` text (chat) or `text`, and maybe the finish and usage.
    fn chunk(
        &self,
        text: Option<&str>,
        lp: Value,
        finish: Option<Finish>,
        usage: Option<Usage>,
    ) -> Value {
        let reason = finish.map(Finish::as_str);
        if self.chat() {
            let delta = match text {
                Some(t) => json!({"content": t}),
                None if finish.is_none() => json!({"role": "assistant", "content": ""}),
                None => json!({}),
            };
            let choice =
                json!({"index": 0, "delta": delta, "logprobs": lp, "finish_reason": reason});
            self.object("chat.completion.chunk", json!([choice]), usage)
        } else {
            let choice = json!({"index": 0, "text": text.unwrap_or(""), "logprobs": lp, "finish_reason": reason});
            self.object("text_completion", json!([choice]), usage)
        }
    }
}

/// Waits for the whole answer and sends it as one object.
async fn collect(reply: Reply, mut rx: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    let mut lps = Vec::new();
    loop {
        match rx.recv().await {
            Some(Event::Text { text: t, logprobs }) => {
                text.push_str(&t);
                lps.extend(logprobs);
            }
            Some(Event::Done { finish, usage }) => {
                let lp = reply.logprobs(&lps, 0);
                let reason = finish.as_str();
                let (kind, choice) = if reply.chat() {
                    (
                        "chat.completion",
                        json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": lp, "finish_reason": reason}),
                    )
                } else {
                    (
                        "text_completion",
                        json!({"index": 0, "text": text, "logprobs": lp, "finish_reason": reason}),
                    )
                };
                return Json(reply.object(kind, json!([choice]), Some(usage))).into_response();
            }
            Some(Event::Failed(e)) => return e.into_response(),
            None => return ApiError::internal("the scheduler dropped the request").into_response(),
        }
    }
}

/// The answer as server-sent events.
fn stream(
    reply: Reply,
    rx: UnboundedReceiver<Event>,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    struct St {
        reply: Reply,
        rx: UnboundedReceiver<Event>,
        out: VecDeque<SseEvent>,
        done: bool,
        offset: usize,
    }
    let data = |v: Value| SseEvent::default().data(v.to_string());
    let mut out = VecDeque::new();
    if reply.chat() {
        out.push_back(data(reply.chunk(None, Value::Null, None, None)));
    }
    let st = St {
        reply,
        rx,
        out,
        done: false,
        offset: 0,
    };
    let events = futures_util::stream::unfold(st, move |mut st| async move {
        loop {
            if let Some(ev) = st.out.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            let r = &st.reply;
            match st.rx.recv().await {
                Some(Event::Text { text, logprobs }) => {
                    let lp = r.logprobs(&logprobs, st.offset);
                    st.offset += text.len();
                    st.out.push_back(data(r.chunk(Some(&text), lp, None, None)));
                }
                Some(Event::Done { finish, usage }) => {
                    let lp = if r.req.params.logprobs.is_some() {
                        r.logprobs(&[], st.offset)
                    } else {
                        Value::Null
                    };
                    let text = (!r.chat()).then_some("");
                    // With `include_usage`, usage comes alone in one more chunk (as OpenAI sends
                    // it); without, in the last chunk.
                    let last_usage = (!r.req.params.include_usage).then_some(usage);
                    st.out
                        .push_back(data(r.chunk(text, lp, Some(finish), last_usage)));
                    if r.req.params.include_usage {
                        st.out
                            .push_back(data(r.object(r.chunk_kind(), json!([]), Some(usage))));
                    }
                    st.out.push_back(SseEvent::default().data("[DONE]"));
                    st.done = true;
                }
                Some(Event::Failed(e)) => {
                    st.out.push_back(data(e.body()));
                    st.out.push_back(SseEvent::default().data("[DONE]"));
                    st.done = true;
                }
                None => st.done = true,
            }
        }
    });
    Sse::new(events)
}

impl Reply {
    fn chunk_kind(&self) -> &'static str {
        if self.chat() {
            "chat.completion.chunk"
        } else {
            "text_completion"
        }
    }
}
