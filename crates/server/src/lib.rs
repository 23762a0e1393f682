//! wgllm-server: an OpenAI-compatible HTTP server (`wgllm serve`) over one loaded model.
//!
//! - `POST /v1/chat/completions`, `POST /v1/completions` (JSON, or server-sent events in OpenAI's
//!   chunk format ending with `data: [DONE]` when `stream` is true), `GET /v1/models`,
//!   `GET /health`, `GET /metrics` (Prometheus text). Routes and response bodies: `routes`.
//! - Requests are checked field by field (`api`); bad input is a 4xx with an OpenAI-style error
//!   object (`error`), and an oversized body is refused before it is read whole.
//! - One scheduler thread owns the model and runs continuous batching over `--parallel` slots
//!   (`scheduler`); requests wait in a bounded queue, and a full queue is a 503 with
//!   `Retry-After`.
//! - An embedding model is served by `embed` instead: `POST /v1/embeddings`, its inputs merged
//!   into the model's batches. A Whisper model is served by `speech`: `POST
//!   /v1/audio/transcriptions` and `/v1/audio/translations`. Each kind answers the others'
//!   routes with a 400 naming the kind.

pub mod api;
pub mod embed;
pub mod error;
mod fields;
pub mod guard;
mod listen;
pub mod metrics;
mod routes;
pub mod scheduler;
mod shared;
pub mod speech;
pub mod structured;

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::Session;

use crate::metrics::Metrics;
use crate::scheduler::{Engine, EngineOptions};

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The name `/v1/models` lists and requests may give as `model`.
    pub model_id: String,
    /// Context of each slot, in tokens (prompt and generation).
    pub n_ctx: usize,
    /// Requests that may wait while every slot is busy (beyond that: 503).
    pub queue: usize,
    /// Most tokens one batched step carries (decode tokens plus prompt chunks).
    pub ubatch: usize,
    /// Largest request body in bytes (beyond that: 413).
    pub max_body_bytes: usize,
    /// Decode a lone request with one step queued ahead on the device (greedy or top-K
    /// sampling without penalties or log-probabilities); off: every step is read before the
    /// next is queued.
    pub queue_ahead: bool,
    /// Freed slots keep their tokens' KV rows; a request takes the free slot where its prompt
    /// reuses the most of them, net of those it throws away, and prefills only the rest
    /// (llama-server's `cache_prompt`; the scheduler's notes give the rule).
    pub prompt_cache: bool,
    /// A step running longer than this means the device hung: every request fails (500) and
    /// `/health` answers 503.
    pub step_timeout: std::time::Duration,
}

impl ServerConfig {
    /// Defaults for a model called `model_id` with slots of `n_ctx` tokens.
    pub fn new(model_id: impl Into<String>, n_ctx: usize) -> ServerConfig {
        ServerConfig {
            model_id: model_id.into(),
            n_ctx,
            queue: 64,
            ubatch: 256,
            max_body_bytes: 1 << 20,
            queue_ahead: true,
            prompt_cache: true,
            step_timeout: std::time::Duration::from_secs(120),
        }
    }
}

/// The state the handlers share.
pub struct App {
    engine: Engine,
    tokenizer: Arc<Tokenizer>,
    /// Compiles requests' grammars against the model's vocabulary.
    grammars: wgllm_structured::Grammars,
    cfg: ServerConfig,
    metrics: Arc<Metrics>,
    /// Seconds since the epoch at start (`created` of `/v1/models`).
    started: u64,
    /// Numbers response ids and seeds requests that give none.
    counter: AtomicU64,
}

impl App {
    /// Starts the scheduler over the session `load` builds (on the scheduler thread; its
    /// `n_seq` is the number of slots and its `n_ctx` must be `cfg.n_ctx`).
    pub fn start(
        load: Box<dyn FnOnce() -> anyhow::Result<Session> + Send>,
        tokenizer: Tokenizer,
        cfg: ServerConfig,
    ) -> anyhow::Result<Arc<App>> {
        let tokenizer = Arc::new(tokenizer);
        let grammars = wgllm_structured::Grammars::new(tokenizer.clone())?;
        let metrics = Arc::new(Metrics::default());
        let opts = EngineOptions {
            queue: cfg.queue,
            ubatch: cfg.ubatch,
            queue_ahead: cfg.queue_ahead,
            prompt_cache: cfg.prompt_cache,
            step_timeout: cfg.step_timeout,
        };
        let engine = Engine::start(load, tokenizer.clone(), opts, metrics.clone())?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Arc::new(App {
            engine,
            tokenizer,
            grammars,
            cfg,
            metrics,
            started,
            counter: AtomicU64::new(started.wrapping_mul(0x9e37_79b9)),
        }))
    }
}

/// How the HTTP side of every server holds up against its clients (see `guard` and `listen`).
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// With a key, requests need `Authorization: Bearer KEY` (401 otherwise).
    pub api_key: Option<String>,
    /// `/health` and `/metrics` need the key too (by default they answer without it, for load
    /// balancers and Prometheus).
    pub api_key_health: bool,
    /// Origins whose pages may call the server (`*`: any); others are refused with 403.
    pub cors: Vec<String>,
    /// Names besides the loopback's that the `Host` header of a loopback server may give.
    pub allowed_hosts: Vec<String>,
    /// A request's headers must arrive within this time of the connection's opening or of its
    /// previous response (so idle keep-alive connections close after it too).
    pub header_timeout: std::time::Duration,
    /// A request's body must arrive within this time of its headers (408 otherwise).
    pub body_timeout: std::time::Duration,
    /// A request's answer, or its stream, must end within this time (504 or an error chunk).
    pub request_timeout: std::time::Duration,
    /// Connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            api_key: None,
            api_key_health: false,
            cors: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout: std::time::Duration::from_secs(10),
            body_timeout: std::time::Duration::from_secs(60),
            request_timeout: std::time::Duration::from_secs(600),
            max_connections: 512,
        }
    }
}

/// What [`serve`] runs: the routes of one loaded model, and how its work ends at shutdown.
pub trait Service: Send + Sync + 'static {
    /// Every route, over the shared state.
    fn router(self: Arc<Self>) -> axum::Router;
    /// Largest request body the routes take, in bytes.
    fn max_body_bytes(&self) -> usize;
    /// Stops taking work (what is queued still ends, as the kind's docs say).
    fn close(&self);
}

impl Service for App {
    fn router(self: Arc<Self>) -> axum::Router {
        routes::router(self)
    }

    fn max_body_bytes(&self) -> usize {
        self.cfg.max_body_bytes
    }

    fn close(&self) {
        self.engine.close();
    }
}

impl Service for speech::SpeechApp {
    fn router(self: Arc<Self>) -> axum::Router {
        speech::router(self)
    }

    fn max_body_bytes(&self) -> usize {
        self.cfg.max_body_bytes
    }

    fn close(&self) {
        speech::SpeechApp::close(self);
    }
}

impl Service for embed::EmbedApp {
    fn router(self: Arc<Self>) -> axum::Router {
        embed::router(self)
    }

    fn max_body_bytes(&self) -> usize {
        self.cfg.max_body_bytes
    }

    fn close(&self) {
        embed::EmbedApp::close(self);
    }
}

/// Serves `app` on `listener` under `http` until `shutdown` completes. Then no connection is
/// accepted, and every request in flight or waiting ends at the next step with a 503 (an error
/// chunk when streamed) instead of generating to the end; this returns once their answers are
/// sent.
pub async fn serve<S: Service>(
    listener: tokio::net::TcpListener,
    app: Arc<S>,
    http: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let closing = app.clone();
    let shutdown = async move {
        shutdown.await;
        closing.close();
    };
    let refusals = Arc::new(metrics::Refusals::default());
    let guard = guard::Guard {
        max_body: app.max_body_bytes(),
        loopback: listener.local_addr()?.ip().is_loopback(),
        cfg: http.clone(),
        refusals: refusals.clone(),
    };
    let router = guard::wrap(app.router(), guard);
    listen::run(listener, router, &http, refusals, shutdown).await
}

/// Completes at the first Ctrl-C, saying on stderr that the server is shutting down; a second
/// Ctrl-C exits the process at once (status 130), so a shutdown waiting on a long response (a
/// stream, a download) can be cut short. Call it within a Tokio runtime.
pub async fn ctrl_c() {
    let _ = tokio::signal::ctrl_c().await;
    eprintln!("wgllm: shutting down (Ctrl-C again to quit at once)");
    tokio::spawn(async {
        let _ = tokio::signal::ctrl_c().await;
        std::process::exit(130);
    });
}

/// Binds `addr` (`host:port`) and serves `app` until Ctrl-C, on a runtime of its own;
/// `on_listen` is told the bound address once connections are accepted. After Ctrl-C the
/// requests in flight end (see [`serve`]); a second Ctrl-C exits at once (status 130).
pub fn serve_blocking<S: Service>(
    addr: &str,
    app: Arc<S>,
    http: HttpConfig,
    on_listen: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
        on_listen(listener.local_addr()?);
        serve(listener, app, http, ctrl_c()).await?;
        Ok(())
    })
}
