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
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::header;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api::{self, Endpoint, ModelInfo, Request};
use crate::error::ApiError;
use crate::guard::Deadline;
use crate::metrics::Metrics;
use crate::scheduler::{Event, Finish, Job, TokenLogprob, Usage};
use crate::App;
use wgllm_structured::tools::{self, Split, StreamSplitter, ToolCall};

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

async fn chat(
    State(app): State<Arc<App>>,
    deadline: Option<Extension<Deadline>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(app, Endpoint::Chat, deadline, body).await
}

async fn completions(
    State(app): State<Arc<App>>,
    deadline: Option<Extension<Deadline>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(app, Endpoint::Completion, deadline, body).await
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
    let why = app.engine.why_stopped();
    crate::shared::health(why.is_none(), why.as_deref().unwrap_or_default())
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
    deadline: Option<Extension<Deadline>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let n = app.counter.fetch_add(1, Ordering::Relaxed);
    // Rendering the template and compiling a grammar are CPU work of unbounded size (both
    // limited by fuel): off the async workers.
    let worker = app.clone();
    let parsed = tokio::task::spawn_blocking(move || {
        let b = body.map_err(|r| ApiError::unread_body(&r, worker.cfg.max_body_bytes))?;
        let info = ModelInfo {
            id: &worker.cfg.model_id,
            tokenizer: &worker.tokenizer,
            n_ctx: worker.cfg.n_ctx,
        };
        let req = api::parse(endpoint, &b, &info, n)?;
        let constraint = match &req.grammar {
            Some((param, g)) => Some(worker.grammars.compile(g).map_err(|e| {
                ApiError::bad_param(param, format!("The grammar cannot be used: {e}"))
            })?),
            None => None,
        };
        Ok::<_, ApiError>((req, constraint))
    })
    .await
    .unwrap_or_else(|e| {
        Err(ApiError::internal(format!(
            "checking the request failed: {e}"
        )))
    });
    let (req, constraint) = match parsed {
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
        constraint,
        events: tx,
    };
    if let Err(e) = app.engine.submit(job) {
        return e.into_response();
    }
    let events = Events {
        rx,
        failed: Box::pin(app.engine.failed()),
        deadline: deadline.map(|Extension(d)| d),
    };
    let reply = Reply {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{n:x}"),
            Endpoint::Completion => format!("cmpl-{n:x}"),
        },
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: app.cfg.model_id.clone(),
        started: std::time::Instant::now(),
        req,
    };
    let id = reply.id.clone();
    let mut r = match reply.req.params.stream {
        true => stream(reply, events).into_response(),
        false => collect(reply, events).await,
    };
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        r.headers_mut().insert("x-request-id", v);
    }
    r
}

/// A request's events, ended early by the scheduler's failure or the request's deadline.
struct Events {
    rx: UnboundedReceiver<Event>,
    failed: std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>,
    deadline: Option<Deadline>,
}

impl Events {
    /// The next event; after a `Failed` one there is nothing more to wait for.
    async fn next(&mut self) -> Event {
        let due = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d.at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            ev = self.rx.recv() => ev.unwrap_or_else(|| {
                Event::Failed(ApiError::internal("the scheduler dropped the request"))
            }),
            why = &mut self.failed => Event::Failed(ApiError::internal(why)),
            () = due => Event::Failed(ApiError::timed_out(
                self.deadline.map_or(0.0, |d| d.limit.as_secs_f64()),
            )),
        }
    }
}

/// What every object of one response repeats.
struct Reply {
    id: String,
    created: u64,
    model: String,
    /// When the request was queued (for its log line).
    started: std::time::Instant,
    req: Request,
}

impl Reply {
    /// The log line of the request's end.
    fn log(&self, end: Result<(Finish, Usage), &ApiError>) {
        let (id, secs) = (&self.id, self.started.elapsed().as_secs_f64());
        let secs = format!("{secs:.3}");
        match end {
            Ok((f, u)) => tracing::info!(
                id,
                finish = f.as_str(),
                prompt_tokens = u.prompt_tokens,
                cached_tokens = u.cached_tokens,
                completion_tokens = u.completion_tokens,
                secs,
                "generated"
            ),
            Err(e) => {
                tracing::warn!(id, status = e.status.as_u16(), error = %e.message, secs, "generation failed")
            }
        }
    }

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
async fn collect(reply: Reply, mut events: Events) -> Response {
    let mut text = String::new();
    let mut lps = Vec::new();
    loop {
        match events.next().await {
            Event::Text { text: t, logprobs } => {
                text.push_str(&t);
                lps.extend(logprobs);
            }
            Event::Done { finish, usage } => {
                reply.log(Ok((finish, usage)));
                let lp = reply.logprobs(&lps, 0);
                let mut reason = finish.as_str();
                let (kind, choice) = if reply.chat() {
                    let mut message = json!({"role": "assistant", "content": text});
                    if let Some(t) = &reply.req.tool_use {
                        let (content, calls) = tools::parse(t.format, &text);
                        if !calls.is_empty() {
                            message["content"] = json!(content);
                            message["tool_calls"] = calls_json(&reply.id, 0, &calls, false);
                            reason = "tool_calls";
                        }
                    }
                    (
                        "chat.completion",
                        json!({"index": 0, "message": message, "logprobs": lp, "finish_reason": reason}),
                    )
                } else {
                    (
                        "text_completion",
                        json!({"index": 0, "text": text, "logprobs": lp, "finish_reason": reason}),
                    )
                };
                return Json(reply.object(kind, json!([choice]), Some(usage))).into_response();
            }
            Event::Failed(e) => {
                reply.log(Err(&e));
                return e.into_response();
            }
        }
    }
}

/// The answer as server-sent events.
fn stream(
    reply: Reply,
    events: Events,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    struct St {
        reply: Reply,
        events: Events,
        out: VecDeque<SseEvent>,
        done: bool,
        offset: usize,
        /// With tools: holds back what may be a call.
        splitter: Option<StreamSplitter>,
        /// Calls streamed so far.
        calls: usize,
    }
    fn data(v: Value) -> SseEvent {
        SseEvent::default().data(v.to_string())
    }
    impl St {
        /// Queues the chunks of `split`: its text (with `lp`, when there is either) and its
        /// calls, numbered after those already streamed.
        fn push(&mut self, split: Split, lp: Value) {
            if !split.text.is_empty() || !lp.is_null() {
                let c = self.reply.chunk(Some(&split.text), lp, None, None);
                self.out.push_back(data(c));
            }
            if !split.calls.is_empty() {
                let c = self.reply.calls_chunk(self.calls, &split.calls);
                self.out.push_back(data(c));
                self.calls += split.calls.len();
            }
        }

        /// Ends the stream with `e` as an error chunk, then `[DONE]`.
        fn fail(&mut self, e: ApiError) {
            self.reply.log(Err(&e));
            self.out.push_back(data(e.body()));
            self.out.push_back(SseEvent::default().data("[DONE]"));
            self.done = true;
        }

        /// The log-probabilities field of a chunk carrying no new token.
        fn no_logprobs(&self) -> Value {
            match self.reply.req.params.logprobs.is_some() {
                true => self.reply.logprobs(&[], self.offset),
                false => Value::Null,
            }
        }
    }
    let mut out = VecDeque::new();
    if reply.chat() {
        out.push_back(data(reply.chunk(None, Value::Null, None, None)));
    }
    let splitter = reply
        .req
        .tool_use
        .as_ref()
        .map(|t| StreamSplitter::new(t.format));
    let st = St {
        reply,
        events,
        out,
        done: false,
        offset: 0,
        splitter,
        calls: 0,
    };
    let events = futures_util::stream::unfold(st, move |mut st| async move {
        loop {
            if let Some(ev) = st.out.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            match st.events.next().await {
                Event::Text { text, logprobs } => {
                    let lp = st.reply.logprobs(&logprobs, st.offset);
                    st.offset += text.len();
                    let split = match st.splitter.as_mut() {
                        Some(sp) => sp.push(&text),
                        None => Split {
                            text,
                            calls: vec![],
                        },
                    };
                    st.push(split, lp);
                }
                Event::Done { mut finish, usage } => {
                    if let Some(split) = st.splitter.as_mut().map(StreamSplitter::finish) {
                        // Held-back text carries no token of its own.
                        let lp = match split.text.is_empty() {
                            true => Value::Null,
                            false => st.no_logprobs(),
                        };
                        st.push(split, lp);
                        if st.calls > 0 {
                            finish = Finish::ToolCalls;
                        }
                    }
                    st.reply.log(Ok((finish, usage)));
                    let lp = st.no_logprobs();
                    let r = &st.reply;
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
                Event::Failed(e) => st.fail(e),
            }
        }
    });
    Sse::new(events)
}

/// OpenAI's `tool_calls` entries for `calls`, numbered from `first` (with `index` when
/// `streamed`, as chunk deltas carry it).
fn calls_json(id: &str, first: usize, calls: &[ToolCall], streamed: bool) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let mut v = json!({
                "id": format!("call_{id}_{}", first + k),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            });
            if streamed {
                v["index"] = json!(first + k);
            }
            v
        })
        .collect()
}

impl Reply {
    /// A chunk whose delta carries whole tool calls, numbered from `first`.
    fn calls_chunk(&self, first: usize, calls: &[ToolCall]) -> Value {
        let delta = json!({"tool_calls": calls_json(&self.id, first, calls, true)});
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": null});
        self.object("chat.completion.chunk", json!([choice]), None)
    }

    fn chunk_kind(&self) -> &'static str {
        if self.chat() {
            "chat.completion.chunk"
        } else {
            "text_completion"
        }
    }
}
