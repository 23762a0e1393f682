//! `wgllm serve`: an OpenAI-compatible HTTP server over one model, with `--parallel` slots whose
//! decoding steps run batched (continuous batching; see the `wgllm-server` crate); an embedding
//! model is served on `/v1/embeddings` instead.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use wgllm_core::DType;
use wgllm_gguf::GgufFile;
use wgllm_models::embed::is_embedding_model;
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{Architecture, EmbedConfig, Session, SessionConfig};
use wgllm_server::embed::{EmbedApp, EmbedServerConfig};
use wgllm_server::speech::{SpeechApp, SpeechServerConfig};
use wgllm_server::{App, HttpConfig, ServerConfig};
use wgllm_speech::WhisperModel;

use super::backend::BackendArgs;

/// Arguments of `wgllm serve`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// GGUF file, a known model name (`smollm2`, `gemma3-270m`, `minilm`, `whisper-tiny.en`) or
    /// `hf:OWNER/REPO/FILE.gguf`; default: smollm2, downloaded on first use. An embedding model
    /// (bert, or a decoder stating a pooling) serves POST /v1/embeddings; a Whisper model
    /// (GGUF or whisper.cpp's ggml-*.bin) serves POST /v1/audio/transcriptions and translations.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub hub: super::pull::HubArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests generated at the same time (slots); their steps run batched.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Context of each slot in tokens (prompt + generation), capped at the model's training
    /// context; the KV cache holds parallel × ctx tokens.
    #[arg(short = 'c', long, default_value_t = 2048)]
    pub ctx: usize,
    /// Requests that may wait while every slot is busy; more are answered 503.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Most tokens one batched step carries (decode tokens plus prompt chunks).
    #[arg(long, default_value_t = 256)]
    pub ubatch: usize,
    /// Largest request body in bytes (default: 1 MiB, or 25 MiB for a speech model, OpenAI's
    /// limit on audio files).
    #[arg(long)]
    pub max_body: Option<usize>,
    /// A speech model's longest audio, in seconds.
    #[arg(long, default_value_t = 3600.0, value_name = "SECONDS")]
    pub max_audio: f64,
    /// Read every decode step before queuing the next, even for a lone request (by default a
    /// lone greedy or top-K-sampled request keeps one step queued ahead on the device).
    #[arg(long)]
    pub no_queue_ahead: bool,
    /// Clear a slot's KV cache for each request (by default a freed slot keeps its tokens, and
    /// a request whose prompt starts with them, like a conversation's next turn, takes that
    /// slot and runs only the rest of its prompt).
    #[arg(long)]
    pub no_prompt_cache: bool,
    /// An embedding model's batches: at most this many tokens (inputs × padded length) in one
    /// graph run; the requests waiting are merged into them.
    #[arg(long, default_value_t = EmbedConfig::default().batch_tokens, value_name = "N")]
    pub batch_tokens: u32,
    /// A step on the device running longer than this means it hung: every request fails and
    /// /health answers 503.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub step_timeout: f64,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// How the server holds up against its clients.
#[derive(ClapArgs, Debug, Clone)]
pub struct HttpArgs {
    /// Require `Authorization: Bearer KEY` on every route (401 otherwise); /health and
    /// /metrics answer without it unless --api-key-health.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Read the API key from the first line of FILE (keeps it out of the process list).
    #[arg(long, value_name = "FILE", conflicts_with = "api_key")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Require the API key on /health and /metrics too.
    #[arg(long)]
    pub api_key_health: bool,
    /// Let web pages of ORIGIN (`https://app.example`, or `*` for any) call the server; requests
    /// from other pages are refused (403). Repeatable.
    #[arg(long, value_name = "ORIGIN")]
    pub cors: Vec<String>,
    /// A name besides localhost, 127.0.0.1 and ::1 that requests to a loopback server may give
    /// as their Host (guards against DNS rebinding). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Close a connection whose request headers take longer than this, counted from its opening
    /// or its previous response (so idle keep-alive connections close after it too).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub header_timeout: f64,
    /// Answer 408 to a request whose body takes longer than this to arrive.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub body_timeout: f64,
    /// End a request (504, or an error chunk when streamed) that runs longer than this.
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub request_timeout: f64,
    /// Connections open at once; more are answered 503 and closed.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub max_connections: usize,
}

impl HttpArgs {
    /// The server's HTTP settings.
    pub fn config(&self) -> Result<HttpConfig> {
        let api_key = match &self.api_key_file {
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("reading the API key from {}", f.display()))?;
                let key = text.lines().next().unwrap_or("").trim().to_string();
                anyhow::ensure!(!key.is_empty(), "{} holds no API key", f.display());
                Some(key)
            }
            None => self.api_key.clone(),
        };
        Ok(HttpConfig {
            api_key,
            api_key_health: self.api_key_health,
            cors: self.cors.clone(),
            allowed_hosts: self.allow_host.clone(),
            header_timeout: seconds("--header-timeout", self.header_timeout)?,
            body_timeout: seconds("--body-timeout", self.body_timeout)?,
            request_timeout: seconds("--request-timeout", self.request_timeout)?,
            max_connections: self.max_connections.max(1),
        })
    }
}

/// `s` seconds as a duration, refusing what is not a positive number.
fn seconds(flag: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{flag} must be a positive number of seconds, not {s}"))
}

/// The model id of `path` (its file name without the extension).
fn model_id(path: &std::path::Path) -> String {
    path.file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

/// Prints the line scripts wait for (stdout, flushed).
fn listening(out: &mut impl Write, a: std::net::SocketAddr) {
    let _ = writeln!(out, "wgllm: listening on http://{a}");
    let _ = out.flush();
}

/// Serves an embedding model until Ctrl-C.
fn serve_embedder(
    args: &Args,
    http: HttpConfig,
    file: GgufFile,
    path: &std::path::Path,
    out: &mut impl Write,
) -> Result<()> {
    let t0 = Instant::now();
    let backend_args = args.backend.clone();
    let described = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let desc = described.clone();
    let backend = Box::new(move || -> Result<Box<dyn wgllm_core::Backend>> {
        let (backend, d) = backend_args.open()?;
        if let Ok(mut slot) = desc.lock() {
            *slot = d;
        }
        Ok(backend)
    });
    let model_id = model_id(path);
    let cfg = EmbedServerConfig {
        model_id: model_id.clone(),
        queue: args.queue,
        max_body_bytes: args.max_body.unwrap_or(1 << 20),
        embed: EmbedConfig {
            batch_tokens: args.batch_tokens,
            ..EmbedConfig::default()
        },
    };
    let app = EmbedApp::start(backend, file, cfg)?;
    let on = described.lock().map(|d| d.clone()).unwrap_or_default();
    eprintln!(
        "wgllm: {model_id} on {on}, embeddings of {} values on /v1/embeddings, loaded in {:.2} s",
        app.dim(),
        t0.elapsed().as_secs_f64()
    );
    let addr = format!("{}:{}", args.host, args.port);
    wgllm_server::serve_blocking(&addr, app, http, |a| listening(out, a))
}

/// Serves a Whisper model until Ctrl-C.
fn serve_speech(
    args: &Args,
    http: HttpConfig,
    path: &std::path::Path,
    out: &mut impl Write,
) -> Result<()> {
    let t0 = Instant::now();
    let model = WhisperModel::open(path).with_context(|| format!("opening {}", path.display()))?;
    let backend_args = args.backend.clone();
    let described = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let desc = described.clone();
    let backend = Box::new(move || -> Result<Box<dyn wgllm_core::Backend>> {
        let (backend, d) = backend_args.open()?;
        if let Ok(mut slot) = desc.lock() {
            *slot = d;
        }
        Ok(backend)
    });
    let model_id = model_id(path);
    let cfg = SpeechServerConfig {
        model_id: model_id.clone(),
        queue: args.queue,
        max_body_bytes: args.max_body.unwrap_or(25 << 20),
        max_audio_seconds: args.max_audio,
    };
    let app = SpeechApp::start(backend, model, cfg)?;
    let on = described.lock().map(|d| d.clone()).unwrap_or_default();
    eprintln!(
        "wgllm: {model_id} on {on}, speech to text on /v1/audio/transcriptions and /v1/audio/translations, loaded in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let addr = format!("{}:{}", args.host, args.port);
    wgllm_server::serve_blocking(&addr, app, http, |a| listening(out, a))
}

/// Loads the model and serves until Ctrl-C (see `wgllm_server::serve_blocking`).
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    if args.parallel == 0 {
        anyhow::bail!("--parallel must be at least 1");
    }
    let http = args.http.config()?;
    let path = super::pull::resolve_model(args.model.as_deref(), &args.hub)?;
    if wgllm_speech::open::is_whisper_file(&path) {
        return serve_speech(args, http, &path, out);
    }
    let t0 = Instant::now();
    let file = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    if is_embedding_model(&file) {
        return serve_embedder(args, http, file, &path, out);
    }
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let n_ctx = args
        .ctx
        .min(Architecture::from_gguf(&file)?.n_ctx_train())
        .max(2);
    let model_id = model_id(&path);
    let cfg = SessionConfig {
        n_ctx,
        ubatch: args.ubatch,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let (backend_args, parallel) = (args.backend.clone(), args.parallel);
    let described = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let desc = described.clone();
    let loaded = std::sync::Arc::new(std::sync::Mutex::new(None));
    let loaded_slot = loaded.clone();
    let load = Box::new(move || -> Result<Session> {
        let (backend, d, counters) = backend_args.open_counted()?;
        if let Ok(mut slot) = desc.lock() {
            *slot = d;
        }
        let file = GgufFile::open(&path)?;
        let total = file.tensors().iter().map(|t| t.size()).sum();
        let (session, put) = super::loading::with_progress(counters, total, || {
            Ok(Session::with_sequences(
                backend.as_ref(),
                &file,
                cfg,
                parallel,
            )?)
        })?;
        if let Ok(mut slot) = loaded_slot.lock() {
            *slot = put;
        }
        Ok(session)
    });
    let server = ServerConfig {
        queue: args.queue,
        ubatch: args.ubatch,
        max_body_bytes: args.max_body.unwrap_or(1 << 20),
        queue_ahead: !args.no_queue_ahead,
        prompt_cache: !args.no_prompt_cache,
        step_timeout: seconds("--step-timeout", args.step_timeout)?,
        ..ServerConfig::new(model_id.clone(), n_ctx)
    };
    let app = App::start(load, tokenizer, server)?;
    let on = described.lock().map(|d| d.clone()).unwrap_or_default();
    let put = loaded.lock().ok().and_then(|l| *l);
    super::loading::report(
        &format!("{model_id} on {on}, {parallel} slots of {n_ctx} tokens"),
        t0,
        put,
    );
    let addr = format!("{}:{}", args.host, args.port);
    wgllm_server::serve_blocking(&addr, app, http, |a| listening(out, a))
}
