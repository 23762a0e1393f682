//! The browser's model runner, free of JavaScript types so it also runs (and is tested) natively:
//! open a backend without blocking, load a GGUF held in memory or streamed in chunks, generate
//! with a text callback, or, for an embedding model (BERT), embed texts, or, for a Whisper model
//! (GGUF or whisper.cpp's `ggml-*.bin`), transcribe an audio file.
//!
//! Streamed loads ([`Engine::begin_stream`], [`Engine::feed`], [`Engine::finish_stream`]) on
//! WebGPU never hold the file: [`GgufStream`] buffers the header, then each piece of tensor data
//! goes straight to the device ([`WebGpuBackend::upload_weight`]) and the step graphs name
//! those resident weights. The CPU reference backend computes from host bytes, so there the
//! stream is collected and loaded as a whole.

use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use wgllm_core::{Backend, DType};
use wgllm_cpu::CpuBackend;
use wgllm_gguf::{GgufError, GgufFile, GgufStream, StreamEvent};
use wgllm_models::arch::EmbeddingArch;
use wgllm_models::embed::is_embedding_model;
use wgllm_models::generate::{generate_async, reusable_prefix, GenStats};
use wgllm_models::sampler::{Sampler, SamplerConfig};
use wgllm_models::tokenizer::{ChatMessage, Tokenizer};
use wgllm_models::{
    Architecture, EmbedConfig, Embedder, ModelError, Session, SessionConfig, Truncate,
};
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::format::Format;
use wgllm_speech::{SpeechError, Transcriber, WhisperModel};
use wgllm_structured::{Grammar, Grammars};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

use crate::constrained::generate_constrained;
pub use crate::error::WebError;

/// Which backend runs the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// WebGPU: the browser's adapter, or natively the one wgpu chooses.
    WebGpu,
    /// The CPU reference backend (single-threaded in the browser).
    Cpu,
}

impl Device {
    /// `"webgpu"` or `"cpu"`.
    pub fn parse(name: &str) -> Option<Device> {
        match name {
            "webgpu" => Some(Device::WebGpu),
            "cpu" => Some(Device::Cpu),
            _ => None,
        }
    }
}

/// Session sizes for a browser tab: a short context and small prefill chunks keep the KV cache
/// and the step graphs small.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    pub n_ctx: usize,
    pub ubatch: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            n_ctx: 1024,
            ubatch: 32,
        }
    }
}

/// The largest context a page may ask for; a model's own limit applies too.
pub const MAX_CTX: usize = 1 << 17;

/// An embedding model's batches in a tab: at most this many tokens a graph run.
const EMBED_BATCH_TOKENS: u32 = 2048;

/// A loaded model.
struct Model {
    session: Session,
    tokenizer: Tokenizer,
    summary: String,
    /// The tokens the session's cache holds: the last prompt and the answer's tokens that were
    /// evaluated (a conversation's next turn re-tokenizes the answer, which mostly, not always,
    /// gives the same tokens: the common prefix decides).
    cached: Vec<u32>,
    /// Of the last prompt, the tokens the cache held already (not run).
    reused: usize,
    /// The grammar compiler of the model's vocabulary, built at the first constrained request.
    grammars: Option<Grammars>,
}

/// The opened backend.
enum Dev {
    Gpu(Box<WebGpuBackend>),
    Cpu(CpuBackend),
}

/// A streamed load to the GPU: tensors go to the device as they arrive; the tokenizer is built
/// from the header.
struct GpuLoad {
    stream: GgufStream,
    tokenizer: Option<Tokenizer>,
}

/// What the engine has loaded.
enum Loaded {
    /// A model that generates text.
    Chat(Box<Model>),
    /// An embedding model, and its summary line.
    Embed(Box<Embedder>, String),
    /// A Whisper model, and its summary line.
    Speech(Box<Transcriber>, String),
}

/// Whether `file` is a Whisper model.
fn is_whisper(file: &GgufFile) -> bool {
    file.architecture().is_ok_and(|a| a == "whisper")
}

/// A streamed load in progress.
enum Loading {
    Gpu(Box<GpuLoad>),
    /// The file is collected for the CPU backend.
    Cpu {
        bytes: Vec<u8>,
        total: Option<u64>,
    },
}

/// An opened backend and, once [`Engine::load`] or a streamed load ran, a model on it.
pub struct Engine {
    dev: Dev,
    adapter: String,
    /// The device has SHADER_F16: the KV cache may be f16.
    f16: bool,
    config: EngineConfig,
    loaded: Option<Loaded>,
    loading: Option<Loading>,
    /// The sha256 a streamed load must have (lower-case hex), and the hash of what came so far.
    checksum: Option<(String, Sha256)>,
}

/// The backend `dev` opened.
fn backend_of(dev: &Dev) -> &dyn Backend {
    match dev {
        Dev::Gpu(b) => b.as_ref(),
        Dev::Cpu(b) => b,
    }
}

impl Engine {
    /// Opens `device` without blocking (the browser's WebGPU device is created asynchronously).
    pub async fn open(device: Device, config: EngineConfig) -> Result<Engine, WebError> {
        let (dev, adapter, f16) = match device {
            Device::WebGpu => {
                let gpu = WebGpuBackend::new_async(WebGpuConfig::default()).await?;
                let a = gpu.adapter();
                // Browsers may leave the description empty.
                let name = if a.name.is_empty() { "WebGPU" } else { &a.name };
                let adapter = format!("{name} ({}, {})", a.backend, a.device_type);
                let f16 = gpu.capabilities().shader_f16;
                (Dev::Gpu(Box::new(gpu)), adapter, f16)
            }
            Device::Cpu => (Dev::Cpu(CpuBackend), "CPU reference backend".into(), true),
        };
        Ok(Engine {
            dev,
            adapter,
            f16,
            config,
            loaded: None,
            loading: None,
            checksum: None,
        })
    }

    /// Sets the context (KV cache) length of the models loaded from now on.
    pub fn set_context_length(&mut self, n_ctx: usize) -> Result<(), WebError> {
        if n_ctx == 0 || n_ctx > MAX_CTX {
            return Err(WebError::BadContext {
                asked: n_ctx,
                max: MAX_CTX,
            });
        }
        self.config.n_ctx = n_ctx;
        Ok(())
    }

    /// The opened backend.
    pub fn backend(&self) -> &dyn Backend {
        backend_of(&self.dev)
    }

    /// What runs the model, e.g. `"swiftshader (BrowserWebGpu, Cpu)"`.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// Parses the GGUF file in `bytes`, builds its tokenizer and compiles its step graphs
    /// (uploading the weights). Replaces any model loaded before. Returns a one-line summary.
    pub fn load(&mut self, bytes: Bytes) -> Result<String, WebError> {
        self.unload();
        let file = match wgllm_speech::ggml_bin::is_ggml_bin(&bytes) {
            true => wgllm_speech::ggml_bin::to_gguf(&bytes)?,
            false => GgufFile::from_bytes(bytes)?,
        };
        if is_whisper(&file) {
            return self.install_speech(file);
        }
        let tokenizer = Tokenizer::from_gguf(&file)?;
        self.install(&file, tokenizer)
    }

    /// Compiles the Whisper model of `file` and makes it the loaded model.
    fn install_speech(&mut self, file: GgufFile) -> Result<String, WebError> {
        let name = file
            .get_str("general.name")
            .unwrap_or("whisper")
            .to_string();
        let (n_tensors, len) = (file.tensors().len(), file.file_len());
        let model = WhisperModel::from_gguf(file)?;
        let c = &model.config;
        let summary = format!(
            "{name}: whisper, {} + {} layers {} wide, {}, {n_tensors} tensors, {:.1} MB",
            c.n_audio_layer,
            c.n_text_layer,
            c.n_audio_state,
            if model.vocab.multilingual {
                "multilingual"
            } else {
                "English-only"
            },
            len as f64 / 1e6,
        );
        let cache = if self.f16 { DType::F16 } else { DType::F32 };
        let t = Transcriber::with_cache(std::sync::Arc::new(model), backend_of(&self.dev), cache)?;
        self.loaded = Some(Loaded::Speech(Box::new(t), summary.clone()));
        Ok(summary)
    }

    /// Drops the model, a load in progress and any weights on the device.
    fn unload(&mut self) {
        self.loaded = None;
        self.loading = None;
        self.checksum = None;
        if let Dev::Gpu(gpu) = &self.dev {
            gpu.drop_resident_weights();
        }
    }

    /// Compiles the step graphs of `file` (whose weights are in it, or resident on the device)
    /// and makes it the loaded model.
    fn install(&mut self, file: &GgufFile, tokenizer: Tokenizer) -> Result<String, WebError> {
        if is_embedding_model(file) {
            let cfg = EmbedConfig {
                batch_tokens: EMBED_BATCH_TOKENS,
                ..EmbedConfig::default()
            };
            let mut e = Embedder::new(file, cfg)?;
            e.prepare(backend_of(&self.dev))?;
            let name = file.get_str("general.name").unwrap_or("model");
            let summary = format!(
                "{name}: {} embeddings of {} values, {} pooling, {} tensors, {:.1} MB",
                file.architecture()?,
                e.dim(),
                e.pooling().name(),
                file.tensors().len(),
                file.file_len() as f64 / 1e6,
            );
            self.loaded = Some(Loaded::Embed(Box::new(e), summary.clone()));
            return Ok(summary);
        }
        let cfg = SessionConfig {
            n_ctx: self.config.n_ctx,
            ubatch: self.config.ubatch,
            // Browsers often lack shader-f16; an f32 cache then keeps every kernel available.
            kv_dtype: if self.f16 { DType::F16 } else { DType::F32 },
            all_logits: false,
        };
        let session = Session::new(self.backend(), file, cfg)?;
        let name = file.get_str("general.name").unwrap_or("model");
        let summary = format!(
            "{name}: {}, {} tensors, {:.1} MB, context {}, KV cache {}",
            file.architecture()?,
            file.tensors().len(),
            file.file_len() as f64 / 1e6,
            cfg.n_ctx,
            cfg.kv_dtype
        );
        self.loaded = Some(Loaded::Chat(Box::new(Model {
            session,
            tokenizer,
            summary: summary.clone(),
            cached: Vec::new(),
            reused: 0,
            grammars: None,
        })));
        Ok(summary)
    }

    /// Starts loading a model whose file arrives in chunks ([`Engine::feed`]) of `total` bytes
    /// when known, whose sha256 must be `sha256` (hex) when given. Replaces any model loaded
    /// before (its device memory is freed first).
    pub fn begin_stream(
        &mut self,
        total: Option<u64>,
        sha256: Option<&str>,
    ) -> Result<(), WebError> {
        self.unload();
        if let Some(h) = sha256 {
            let h = h.to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(WebError::BadChecksum(h));
            }
            self.checksum = Some((h, Sha256::new()));
        }
        self.loading = Some(match self.dev {
            Dev::Gpu(_) => Loading::Gpu(Box::new(GpuLoad {
                stream: GgufStream::new(total),
                tokenizer: None,
            })),
            Dev::Cpu(_) => Loading::Cpu {
                bytes: Vec::new(),
                total,
            },
        });
        Ok(())
    }

    /// The next chunk of the file being streamed. On WebGPU the header is checked as soon as
    /// it is complete (architecture, tokenizer) and every tensor byte goes to the device. An
    /// error abandons the load.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), WebError> {
        if let Some((_, hasher)) = &mut self.checksum {
            hasher.update(chunk);
        }
        let r = self.feed_inner(chunk);
        if r.is_err() {
            self.unload();
        }
        r
    }

    fn feed_inner(&mut self, chunk: &[u8]) -> Result<(), WebError> {
        match (self.loading.as_mut().ok_or(WebError::NoStream)?, &self.dev) {
            (Loading::Gpu(load), Dev::Gpu(gpu)) => {
                let GpuLoad { stream, tokenizer } = load.as_mut();
                stream.feed(chunk, |event| on_event(gpu, tokenizer, event))
            }
            (Loading::Cpu { bytes, total }, _) => {
                bytes.extend_from_slice(chunk);
                match *total {
                    Some(t) if bytes.len() as u64 > t => Err(GgufError::StreamLength {
                        announced: t,
                        got: bytes.len() as u64,
                        ended: false,
                    }
                    .into()),
                    _ => Ok(()),
                }
            }
            (Loading::Gpu(_), Dev::Cpu(_)) => Err(WebError::NoStream),
        }
    }

    /// Ends the streamed load: the stream must have delivered the whole file. Compiles the step
    /// graphs on the uploaded weights and returns the model's summary.
    pub fn finish_stream(&mut self) -> Result<String, WebError> {
        let r = self.finish_inner();
        if r.is_err() {
            self.unload();
        }
        r
    }

    fn finish_inner(&mut self) -> Result<String, WebError> {
        // Checked before the model is built: a wrong file never becomes the loaded model.
        if let Some((expected, hasher)) = self.checksum.take() {
            let got: String = hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if got != expected {
                return Err(WebError::Checksum { expected, got });
            }
        }
        match (self.loading.take().ok_or(WebError::NoStream)?, &self.dev) {
            (Loading::Gpu(load), Dev::Gpu(gpu)) => {
                let GpuLoad {
                    stream,
                    mut tokenizer,
                } = *load;
                let file = stream.finish(|event| on_event(gpu, &mut tokenizer, event))?;
                if is_whisper(&file) {
                    return self.install_speech(file);
                }
                let tokenizer = tokenizer.ok_or(WebError::NoStream)?;
                self.install(&file, tokenizer)
            }
            (Loading::Cpu { bytes, total }, _) => {
                let got = bytes.len() as u64;
                if let Some(announced) = total.filter(|&t| t != got) {
                    return Err(GgufError::StreamLength {
                        announced,
                        got,
                        ended: true,
                    }
                    .into());
                }
                self.load(bytes.into())
            }
            (Loading::Gpu(_), Dev::Cpu(_)) => Err(WebError::NoStream),
        }
    }

    /// Abandons a streamed load in progress, freeing what it uploaded.
    pub fn abort_stream(&mut self) {
        if self.loading.is_some() {
            self.unload();
        }
    }

    /// Bytes of the model's weights resident on the device (0 on the CPU backend).
    pub fn resident_bytes(&self) -> u64 {
        match &self.dev {
            Dev::Gpu(gpu) => gpu.resident_weights().1,
            Dev::Cpu(_) => 0,
        }
    }

    /// The loaded model's summary, if any.
    pub fn model_summary(&self) -> Option<&str> {
        match &self.loaded {
            Some(Loaded::Chat(m)) => Some(m.summary.as_str()),
            Some(Loaded::Embed(_, summary)) | Some(Loaded::Speech(_, summary)) => {
                Some(summary.as_str())
            }
            None => None,
        }
    }

    /// What the loaded model does: `"chat"`, `"embedding"` or `"speech"`.
    pub fn model_kind(&self) -> Option<&'static str> {
        match &self.loaded {
            Some(Loaded::Chat(_)) => Some("chat"),
            Some(Loaded::Embed(..)) => Some("embedding"),
            Some(Loaded::Speech(..)) => Some("speech"),
            None => None,
        }
    }

    /// The loaded model, for generation.
    fn generator(&self) -> Result<&Model, WebError> {
        match &self.loaded {
            Some(Loaded::Chat(m)) => Ok(m),
            Some(Loaded::Embed(..)) => Err(WebError::NotGenerating),
            Some(Loaded::Speech(..)) => Err(WebError::SpeechModel),
            None => Err(WebError::NoModel),
        }
    }

    /// The embeddings of `texts`, one vector per text (unit length when `normalize`), in
    /// order; a text longer than the model's positions is cut to fit under `truncate`, else
    /// refused.
    pub async fn embed(
        &mut self,
        texts: &[String],
        normalize: bool,
        truncate: bool,
    ) -> Result<Vec<Vec<f32>>, WebError> {
        let e = match &mut self.loaded {
            Some(Loaded::Embed(e, _)) => e,
            Some(Loaded::Chat(_)) => return Err(WebError::NotEmbedding),
            Some(Loaded::Speech(..)) => return Err(WebError::SpeechModel),
            None => return Err(WebError::NoModel),
        };
        let truncate = if truncate {
            Truncate::Yes
        } else {
            Truncate::No
        };
        let ids = texts
            .iter()
            .map(|t| e.tokenize(t, truncate))
            .collect::<Result<Vec<_>, _>>()?;
        let backend = backend_of(&self.dev);
        Ok(e.embed_ids_async(backend, &ids, normalize, |_| {}).await?)
    }

    /// Transcribes the audio file `bytes` (WAV, FLAC, MP3, Ogg; `ext` its file name's extension)
    /// with the loaded Whisper model: in `language` (a code, or `auto`), translated to English
    /// when `translate`, written as `format` (`text`, `json`, `verbose_json`, `srt`, `vtt`);
    /// a window whose greedy decoding fails is retried at higher temperatures when `fallback`
    /// (whisper.cpp's default); `on_progress` hears the fraction done after each 30 s window.
    #[allow(clippy::too_many_arguments)]
    pub async fn transcribe(
        &mut self,
        bytes: Vec<u8>,
        ext: Option<&str>,
        language: &str,
        translate: bool,
        format: &str,
        fallback: bool,
        on_progress: impl FnMut(f32),
    ) -> Result<String, WebError> {
        let t = match &mut self.loaded {
            Some(Loaded::Speech(t, _)) => t,
            Some(_) => return Err(WebError::NotSpeech),
            None => return Err(WebError::NoModel),
        };
        let fmt = Format::parse(format).ok_or_else(|| {
            SpeechError::Unsupported(format!(
                "'{format}' is not a format (text, json, verbose_json, srt, vtt)"
            ))
        })?;
        let language = match language {
            "" | "auto" => None,
            l => Some(
                wgllm_speech::lang::find(l)
                    .ok_or_else(|| SpeechError::UnknownLanguage(l.into()))?,
            ),
        };
        let multilingual = t.model().vocab.multilingual;
        if !multilingual && (translate || language.is_some_and(|l| l != 0)) {
            return Err(SpeechError::Unsupported(
                "this model is English-only: other languages and translation need a multilingual one".into(),
            )
            .into());
        }
        let audio = wgllm_speech::audio::decode(bytes, ext, None)?;
        let opts = DecodeOptions {
            language,
            translate,
            temperature_inc: if fallback { 0.2 } else { 0.0 },
            ..DecodeOptions::default()
        };
        let tr = t.transcribe_async(&audio, &opts, on_progress).await?;
        let task = if translate { "translate" } else { "transcribe" };
        Ok(wgllm_speech::format::write(&tr, fmt, task, audio.seconds()))
    }

    /// Token ids of `text`: wrapped in the model's chat template as one user message when
    /// `chat`, else as a raw completion prompt.
    pub fn prompt_ids(&self, text: &str, chat: bool) -> Result<Vec<u32>, WebError> {
        let tok = &self.generator()?.tokenizer;
        Ok(tok.prompt_ids(text, chat)?)
    }

    /// Of the last prompt [`Engine::generate`] took, the tokens its cache held already.
    pub fn reused_tokens(&self) -> usize {
        match &self.loaded {
            Some(Loaded::Chat(m)) => m.reused,
            _ => 0,
        }
    }

    /// Token ids of a conversation in the model's chat template, opening the assistant's reply.
    pub fn chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, WebError> {
        let tok = &self.generator()?.tokenizer;
        Ok(tok.chat_ids(messages)?)
    }

    /// Generates up to `max_tokens` after `prompt`, calling `on_text` with each piece of text
    /// (return `false` to stop), held to `grammar` when one is given (the reply is then a
    /// sentence of it, or cut at `max_tokens`). The part of `prompt` the cache holds from the
    /// last generation (its prompt and answer: a conversation's earlier turns) is not run
    /// again; `GenStats::prompt_tokens` counts the tokens that were.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: SamplerConfig,
        grammar: Option<&Grammar>,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<GenStats, WebError> {
        let m = match &mut self.loaded {
            Some(Loaded::Chat(m)) => m,
            Some(Loaded::Embed(..)) => return Err(WebError::NotGenerating),
            Some(Loaded::Speech(..)) => return Err(WebError::SpeechModel),
            None => return Err(WebError::NoModel),
        };
        // A grammar that does not compile is refused before the cache changes.
        let mut constraint = match grammar {
            Some(g) => {
                if m.grammars.is_none() {
                    m.grammars = Some(Grammars::new(Arc::new(m.tokenizer.clone()))?);
                }
                Some(m.grammars.as_ref().expect("just built").compile(g)?)
            }
            None => None,
        };
        let common = reusable_prefix(&m.cached, prompt);
        m.session.truncate(common);
        m.cached.truncate(common);
        m.reused = common;
        let mut sampler = Sampler::new(sampler);
        let (session, tokenizer, rest) = (&mut m.session, &m.tokenizer, &prompt[common..]);
        let result = match constraint.as_mut() {
            Some(c) => {
                generate_constrained(
                    session,
                    tokenizer,
                    &mut sampler,
                    c,
                    rest,
                    max_tokens,
                    on_text,
                )
                .await
            }
            None => generate_async(session, tokenizer, &mut sampler, rest, max_tokens, on_text)
                .await
                .map_err(WebError::from),
        };
        let stats = match result {
            Ok(stats) => stats,
            // Refused before anything ran: the cache still holds the common part. The CLI's
            // advice (raise --ctx) means nothing on the page.
            Err(WebError::Model(ModelError::ContextFull { need, ctx, .. })) => {
                return Err(WebError::ContextFull { need, ctx })
            }
            Err(e) => {
                m.cached.clear();
                return Err(e);
            }
        };
        m.cached = [prompt, &stats.tokens].concat();
        m.cached.truncate(m.session.n_past());
        Ok(stats)
    }
}

/// One event of a streamed load on WebGPU: the header is checked (its architecture) and gives
/// the tokenizer; tensor data goes to the device.
fn on_event(
    gpu: &WebGpuBackend,
    tokenizer: &mut Option<Tokenizer>,
    event: StreamEvent<'_>,
) -> Result<(), WebError> {
    match event {
        StreamEvent::Header(file) => {
            // Refuse an unusable model before its weights are downloaded.
            if is_whisper(file) {
                wgllm_speech::model::WhisperConfig::from_gguf(file)?;
                return Ok(());
            }
            if is_embedding_model(file) {
                EmbeddingArch::from_gguf(file)?;
            } else {
                Architecture::from_gguf(file)?;
            }
            *tokenizer = Some(Tokenizer::from_gguf(file)?);
            Ok(())
        }
        StreamEvent::Data {
            tensor,
            offset,
            bytes,
        } => Ok(gpu.upload_weight(
            tensor.name(),
            tensor.dtype(),
            tensor.layout().ne,
            offset,
            bytes,
        )?),
    }
}
