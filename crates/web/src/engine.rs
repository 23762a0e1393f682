//! The browser's model runner, free of JavaScript types so it also runs (and is tested) natively:
//! open a backend without blocking, load a GGUF held in memory, generate with a text callback.

use bytes::Bytes;
use wgllm_core::{Backend, DType};
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::generate::{generate_async, GenStats};
use wgllm_models::sampler::{Sampler, SamplerConfig};
use wgllm_models::tokenizer::{ChatMessage, Tokenizer};
use wgllm_models::{ModelError, Session, SessionConfig};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

/// Why the engine could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Device(#[from] wgllm_core::Error),
    #[error(transparent)]
    Gguf(#[from] wgllm_gguf::GgufError),
    #[error(transparent)]
    Tokenizer(#[from] wgllm_models::tokenizer::TokenizerError),
    #[error("no model is loaded")]
    NoModel,
}

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

/// A loaded model.
struct Model {
    session: Session,
    tokenizer: Tokenizer,
    summary: String,
}

/// An opened backend and, once [`Engine::load`] ran, a model on it.
pub struct Engine {
    backend: Box<dyn Backend>,
    adapter: String,
    /// The device has SHADER_F16: the KV cache may be f16.
    f16: bool,
    config: EngineConfig,
    model: Option<Model>,
}

impl Engine {
    /// Opens `device` without blocking (the browser's WebGPU device is created asynchronously).
    pub async fn open(device: Device, config: EngineConfig) -> Result<Engine, WebError> {
        let (backend, adapter, f16): (Box<dyn Backend>, String, bool) = match device {
            Device::WebGpu => {
                let gpu = WebGpuBackend::new_async(WebGpuConfig::default()).await?;
                let a = gpu.adapter();
                // Browsers may leave the description empty.
                let name = if a.name.is_empty() { "WebGPU" } else { &a.name };
                let adapter = format!("{name} ({}, {})", a.backend, a.device_type);
                let f16 = gpu.capabilities().shader_f16;
                (Box::new(gpu), adapter, f16)
            }
            Device::Cpu => (Box::new(CpuBackend), "CPU reference backend".into(), true),
        };
        Ok(Engine {
            backend,
            adapter,
            f16,
            config,
            model: None,
        })
    }

    /// The opened backend.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// What runs the model, e.g. `"swiftshader (BrowserWebGpu, Cpu)"`.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// Parses the GGUF file in `bytes`, builds its tokenizer and compiles its step graphs
    /// (uploading the weights). Replaces any model loaded before. Returns a one-line summary.
    pub fn load(&mut self, bytes: Bytes) -> Result<String, WebError> {
        self.model = None;
        let file = GgufFile::from_bytes(bytes)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let cfg = SessionConfig {
            n_ctx: self.config.n_ctx,
            ubatch: self.config.ubatch,
            // Browsers often lack shader-f16; an f32 cache then keeps every kernel available.
            kv_dtype: if self.f16 { DType::F16 } else { DType::F32 },
            all_logits: false,
        };
        let session = Session::new(self.backend.as_ref(), &file, cfg)?;
        let name = file.get_str("general.name").unwrap_or("model");
        let summary = format!(
            "{name}: {}, {} tensors, {:.1} MB, context {}, KV cache {}",
            file.architecture()?,
            file.tensors().len(),
            file.file_len() as f64 / 1e6,
            cfg.n_ctx,
            cfg.kv_dtype
        );
        self.model = Some(Model {
            session,
            tokenizer,
            summary: summary.clone(),
        });
        Ok(summary)
    }

    /// The loaded model's summary, if any.
    pub fn model_summary(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.summary.as_str())
    }

    /// Token ids of `text`: wrapped in the model's chat template as one user message when
    /// `chat`, else as a raw completion prompt.
    pub fn prompt_ids(&self, text: &str, chat: bool) -> Result<Vec<u32>, WebError> {
        let tok = &self.model.as_ref().ok_or(WebError::NoModel)?.tokenizer;
        if !chat {
            return Ok(tok.encode(text, true)?);
        }
        let rendered = tok.render_chat(&[ChatMessage::new("user", text)], true)?;
        let has_bos = tok
            .bos()
            .and_then(|b| tok.token_str(b))
            .is_some_and(|b| rendered.starts_with(b));
        Ok(tok.encode_with(&rendered, !has_bos, true)?)
    }

    /// Generates up to `max_tokens` after `prompt` from an empty cache, calling `on_text` with
    /// each piece of text (return `false` to stop).
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: SamplerConfig,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<GenStats, WebError> {
        let m = self.model.as_mut().ok_or(WebError::NoModel)?;
        m.session.reset();
        let mut sampler = Sampler::new(sampler);
        Ok(generate_async(
            &mut m.session,
            &m.tokenizer,
            &mut sampler,
            prompt,
            max_tokens,
            on_text,
        )
        .await?)
    }
}
