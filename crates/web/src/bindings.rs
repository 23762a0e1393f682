//! The JavaScript API (wasm-bindgen). Errors reach JavaScript as `Error` objects with the
//! engine's message.

use js_sys::{Function, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wgllm_models::sampler::SamplerConfig;
use wgllm_models::tokenizer::ChatMessage;

use crate::engine::{Device, Engine, EngineConfig};
use crate::ops::run_ops;

fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn set(obj: &js_sys::Object, key: &str, value: JsValue) -> Result<(), JsError> {
    Reflect::set(obj, &key.into(), &value)
        .map(|_| ())
        .map_err(|_| JsError::new("building a result object"))
}

/// A backend and a model, as the page sees them.
#[wasm_bindgen]
pub struct WebEngine {
    inner: Engine,
}

#[wasm_bindgen]
impl WebEngine {
    /// Opens `"webgpu"` (the browser's adapter) or `"cpu"` (the reference backend), with a KV
    /// cache of `n_ctx` tokens.
    pub async fn open(device: String, n_ctx: u32) -> Result<WebEngine, JsError> {
        let dev = Device::parse(&device)
            .ok_or_else(|| JsError::new(&format!("unknown device '{device}': webgpu or cpu")))?;
        let config = EngineConfig {
            n_ctx: n_ctx as usize,
            ..EngineConfig::default()
        };
        let inner = Engine::open(dev, config).await.map_err(js_err)?;
        Ok(WebEngine { inner })
    }

    /// The adapter (or backend) in use.
    pub fn adapter(&self) -> String {
        self.inner.adapter().to_string()
    }

    /// Loads a GGUF file from its bytes (copied once into wasm memory); returns a summary line.
    pub fn load(&mut self, bytes: Uint8Array) -> Result<String, JsError> {
        self.inner.load(bytes.to_vec().into()).map_err(js_err)
    }

    /// Loads a GGUF file from `stream` (`fetch(url).body`, `file.stream()`), `totalBytes` long
    /// (its size or `Content-Length`; 0 when unknown, e.g. a compressed response), calling
    /// `onProgress(loaded, total)` after each chunk (`total` is `null` when unknown). On WebGPU
    /// each tensor goes to the GPU as it arrives and the file never sits whole in wasm memory;
    /// the CPU backend collects it. Resolves to the summary line `load` returns; rejects (and
    /// cancels the stream) on a bad or truncated file or a failed read.
    #[wasm_bindgen(js_name = loadStream)]
    pub async fn load_stream(
        &mut self,
        stream: web_sys::ReadableStream,
        #[wasm_bindgen(js_name = totalBytes)] total_bytes: f64,
        #[wasm_bindgen(js_name = onProgress)] on_progress: Function,
    ) -> Result<String, JsError> {
        let total = (total_bytes.is_finite() && total_bytes > 0.0).then_some(total_bytes as u64);
        crate::stream::load_stream(&mut self.inner, &stream, total, &on_progress)
            .await
            .map_err(js_err)
    }

    /// Token ids of `text` (chat-templated as one user message when `chat`).
    #[wasm_bindgen(js_name = promptIds)]
    pub fn prompt_ids(&self, text: &str, chat: bool) -> Result<Vec<u32>, JsError> {
        self.inner.prompt_ids(text, chat).map_err(js_err)
    }

    /// Generates up to `max_tokens` after `text` (greedy when `temperature <= 0`), calling
    /// `on_text(piece)` with each piece as it is decoded; `on_text` returning `false` stops.
    /// Resolves to `{text, promptTokens, cachedTokens, generatedTokens, promptTps, generateTps,
    /// stop}`: of the prompt, `promptTokens` ran and `cachedTokens` were held in the cache from
    /// the last prompt.
    pub async fn generate(
        &mut self,
        text: String,
        chat: bool,
        max_tokens: u32,
        temperature: f32,
        on_text: Function,
    ) -> Result<JsValue, JsError> {
        let ids = self.inner.prompt_ids(&text, chat).map_err(js_err)?;
        self.run(&ids, max_tokens, temperature, &on_text).await
    }

    /// Like `generate`, for a conversation: `messages` is an array of `{role, content}`
    /// (`system`, `user`, `assistant`), rendered with the model's chat template. The turns a
    /// previous call already ran stay in the cache: only the new ones run.
    #[wasm_bindgen(js_name = generateChat)]
    pub async fn generate_chat(
        &mut self,
        messages: js_sys::Array,
        max_tokens: u32,
        temperature: f32,
        on_text: Function,
    ) -> Result<JsValue, JsError> {
        let field = |m: &JsValue, i: u32, key: &str| {
            Reflect::get(m, &key.into())
                .ok()
                .and_then(|v| v.as_string())
                .ok_or_else(|| JsError::new(&format!("messages[{i}].{key} must be a string")))
        };
        let mut list = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let i = i as u32;
            list.push(ChatMessage::new(
                field(&m, i, "role")?,
                field(&m, i, "content")?,
            ));
        }
        let ids = self.inner.chat_ids(&list).map_err(js_err)?;
        self.run(&ids, max_tokens, temperature, &on_text).await
    }

    /// Embeddings of `texts` (an array of strings) with the loaded embedding model: resolves
    /// to an array of `Float32Array`s, one per text, unit length when `normalize`. A text
    /// longer than the model's positions is cut when `truncate`, else the call rejects.
    pub async fn embed(
        &mut self,
        texts: js_sys::Array,
        normalize: bool,
        truncate: bool,
    ) -> Result<js_sys::Array, JsError> {
        let mut list = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            list.push(
                t.as_string()
                    .ok_or_else(|| JsError::new(&format!("texts[{i}] must be a string")))?,
            );
        }
        let vecs = self
            .inner
            .embed(&list, normalize, truncate)
            .await
            .map_err(js_err)?;
        let out = js_sys::Array::new();
        for v in vecs {
            out.push(&js_sys::Float32Array::from(&v[..]));
        }
        Ok(out)
    }

    /// Transcribes an audio file (WAV, FLAC, MP3, Ogg: its bytes and name) with the loaded
    /// Whisper model: `language` a code or `"auto"`, `translate` into English (multilingual
    /// models), `format` one of `text`, `json`, `verbose_json`, `srt`, `vtt`, `fallback` to
    /// retry a failed window at higher temperatures (whisper.cpp's default; slower); calls
    /// `onProgress(fraction)` after each 30 s window. Resolves to the transcript in that format.
    #[allow(clippy::too_many_arguments)]
    pub async fn transcribe(
        &mut self,
        bytes: Uint8Array,
        file_name: String,
        language: String,
        translate: bool,
        format: String,
        fallback: bool,
        on_progress: Function,
    ) -> Result<String, JsError> {
        let ext = std::path::Path::new(&file_name)
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase());
        self.inner
            .transcribe(
                bytes.to_vec(),
                ext.as_deref(),
                &language,
                translate,
                &format,
                fallback,
                |f| {
                    let _ = on_progress.call1(&JsValue::NULL, &JsValue::from_f64(f64::from(f)));
                },
            )
            .await
            .map_err(js_err)
    }

    /// Runs the op-table cases whose op is in `ops` (comma-separated; empty: all) and whose
    /// name contains `filter` on this engine's backend against the CPU reference. Resolves to
    /// `{passed, unsupported, problems: [string]}`.
    #[wasm_bindgen(js_name = runOps)]
    pub async fn run_ops(&self, ops: String, filter: String) -> Result<JsValue, JsError> {
        let ops: Vec<&str> = ops.split(',').filter(|s| !s.is_empty()).collect();
        let s = run_ops(self.inner.backend(), &ops, &filter, |_| {}).await;
        let obj = js_sys::Object::new();
        set(&obj, "passed", s.passed.into())?;
        set(&obj, "unsupported", s.unsupported.into())?;
        let problems = js_sys::Array::new();
        for p in s.problems {
            problems.push(&p.into());
        }
        set(&obj, "problems", problems.into())?;
        Ok(obj.into())
    }
}

impl WebEngine {
    async fn run(
        &mut self,
        ids: &[u32],
        max_tokens: u32,
        temperature: f32,
        on_text: &Function,
    ) -> Result<JsValue, JsError> {
        let sampler = SamplerConfig {
            temperature,
            ..SamplerConfig::default()
        };
        let mut out = String::new();
        let stats = self
            .inner
            .generate(ids, max_tokens as usize, sampler, |piece| {
                out.push_str(piece);
                // A callback that throws or returns `false` stops generation.
                on_text
                    .call1(&JsValue::NULL, &JsValue::from_str(piece))
                    .map(|v| v.as_bool() != Some(false))
                    .unwrap_or(false)
            })
            .await
            .map_err(js_err)?;
        let obj = js_sys::Object::new();
        set(&obj, "text", out.into())?;
        set(&obj, "promptTokens", stats.prompt_tokens.into())?;
        set(&obj, "cachedTokens", self.inner.reused_tokens().into())?;
        set(&obj, "generatedTokens", stats.generated_tokens.into())?;
        set(&obj, "promptTps", stats.prompt_tps().into())?;
        set(&obj, "generateTps", stats.generate_tps().into())?;
        set(&obj, "stop", format!("{:?}", stats.stop).into())?;
        Ok(obj.into())
    }
}
