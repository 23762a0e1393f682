//! The JavaScript API (wasm-bindgen). Errors reach JavaScript as `Error` objects with the
//! engine's message.

use js_sys::{Function, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wgllm_models::generate::StopReason;
use wgllm_models::sampler::SamplerConfig;
use wgllm_models::stop::StopMatcher;
use wgllm_models::tokenizer::ChatMessage;
use wgllm_structured::request::output_grammar;
use wgllm_structured::Grammar;

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

/// `options.key` as a number, when present (`undefined` and `null` are absent).
fn number(options: &JsValue, key: &str) -> Result<Option<f64>, JsError> {
    let v = Reflect::get(options, &key.into()).unwrap_or(JsValue::UNDEFINED);
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(JsError::new(&format!(
            "options.{key} must be a finite number"
        ))),
    }
}

/// A whole number of at least 0 (`options.key`), when present.
fn count(options: &JsValue, key: &str) -> Result<Option<u64>, JsError> {
    match number(options, key)? {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x <= 2f64.powi(53) => Ok(Some(x as u64)),
        Some(_) => Err(JsError::new(&format!(
            "options.{key} must be a whole number of at least 0"
        ))),
        None => Ok(None),
    }
}

/// How many tokens to generate and how to sample them, from `{maxTokens, temperature, topK,
/// topP, minP, repeatPenalty, presencePenalty, frequencyPenalty, penaltyLastN, seed}`; absent
/// fields take the CLI's defaults (64 tokens; `SamplerConfig::default()`).
fn generation_options(options: &JsValue) -> Result<(usize, SamplerConfig), JsError> {
    if !(options.is_undefined() || options.is_null() || options.is_object()) {
        return Err(JsError::new("options must be an object"));
    }
    let d = SamplerConfig::default();
    let f = |key: &str, default: f32| number(options, key).map(|v| v.map_or(default, |x| x as f32));
    let sampler = SamplerConfig {
        temperature: f("temperature", d.temperature)?,
        top_k: count(options, "topK")?.map_or(d.top_k, |k| k as usize),
        top_p: f("topP", d.top_p)?,
        min_p: f("minP", d.min_p)?,
        repeat_penalty: f("repeatPenalty", d.repeat_penalty)?,
        presence_penalty: f("presencePenalty", d.presence_penalty)?,
        frequency_penalty: f("frequencyPenalty", d.frequency_penalty)?,
        penalty_last_n: count(options, "penaltyLastN")?.map_or(d.penalty_last_n, |n| n as usize),
        seed: count(options, "seed")?.unwrap_or(d.seed),
    };
    if !(0.0..=1.0).contains(&sampler.top_p) || !(0.0..=1.0).contains(&sampler.min_p) {
        return Err(JsError::new(
            "options.topP and options.minP must be within 0 and 1",
        ));
    }
    if sampler.repeat_penalty <= 0.0 {
        return Err(JsError::new("options.repeatPenalty must be above 0"));
    }
    let max_tokens = count(options, "maxTokens")?.map_or(64, |n| n as usize);
    Ok((max_tokens, sampler))
}

/// `options.stop`: the stop strings (at most 4, none empty), when present.
fn stop_strings(options: &JsValue) -> Result<Vec<String>, JsError> {
    if options.is_undefined() || options.is_null() {
        return Ok(Vec::new());
    }
    let v = Reflect::get(options, &"stop".into()).unwrap_or(JsValue::UNDEFINED);
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    let bad = || JsError::new("options.stop must be an array of up to 4 non-empty strings");
    let list = v.dyn_into::<js_sys::Array>().map_err(|_| bad())?;
    let stops: Vec<String> = list
        .iter()
        .map(|s| s.as_string().filter(|s| !s.is_empty()).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    match stops.len() {
        0..=4 => Ok(stops),
        _ => Err(bad()),
    }
}

/// The grammar a reply is held to: `options.structured` is the JSON of the request's fields
/// that constrain it (`response_format`, `grammar`, `json_schema`), read as the server reads
/// them.
fn grammar_option(options: &JsValue) -> Result<Option<Grammar>, JsError> {
    if options.is_undefined() || options.is_null() {
        return Ok(None);
    }
    let v = Reflect::get(options, &"structured".into()).unwrap_or(JsValue::UNDEFINED);
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    let text = v
        .as_string()
        .ok_or_else(|| JsError::new("options.structured must be a JSON string"))?;
    let fields: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| JsError::new(&format!("options.structured is not JSON: {e}")))?;
    output_grammar(|k| fields.get(k).filter(|v| !v.is_null()))
        .map(|g| g.map(|(_, g)| g))
        .map_err(|e| JsError::new(&e.message))
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

    /// Sets the context (KV cache) length, in tokens, of the models loaded from now on.
    #[wasm_bindgen(js_name = setContextLength)]
    pub fn set_context_length(&mut self, n_ctx: u32) -> Result<(), JsError> {
        self.inner
            .set_context_length(n_ctx as usize)
            .map_err(js_err)
    }

    /// What the loaded model does: `"chat"`, `"embedding"` or `"speech"` (`undefined`: none).
    #[wasm_bindgen(js_name = modelKind)]
    pub fn model_kind(&self) -> Option<String> {
        self.inner.model_kind().map(String::from)
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
    /// the CPU backend collects it. With `sha256` (hex), the file must have that hash: checked
    /// before the model is built. Resolves to the summary line `load` returns; rejects (and
    /// cancels the stream) on a bad, truncated or other file or a failed read.
    #[wasm_bindgen(js_name = loadStream)]
    pub async fn load_stream(
        &mut self,
        stream: web_sys::ReadableStream,
        #[wasm_bindgen(js_name = totalBytes)] total_bytes: f64,
        #[wasm_bindgen(js_name = onProgress)] on_progress: Function,
        sha256: Option<String>,
    ) -> Result<String, JsError> {
        let total = (total_bytes.is_finite() && total_bytes > 0.0).then_some(total_bytes as u64);
        let sha256 = sha256.filter(|h| !h.is_empty());
        crate::stream::load_stream(
            &mut self.inner,
            &stream,
            total,
            sha256.as_deref(),
            &on_progress,
        )
        .await
        .map_err(js_err)
    }

    /// Token ids of `text` (chat-templated as one user message when `chat`).
    #[wasm_bindgen(js_name = promptIds)]
    pub fn prompt_ids(&self, text: &str, chat: bool) -> Result<Vec<u32>, JsError> {
        self.inner.prompt_ids(text, chat).map_err(js_err)
    }

    /// Generates after `text` as `options` says (`{maxTokens, temperature, topK, topP, minP,
    /// repeatPenalty, presencePenalty, frequencyPenalty, penaltyLastN, seed, stop, structured}`,
    /// each optional; greedy when `temperature <= 0`; `stop` up to 4 strings; `structured` the
    /// JSON of the request's `response_format`, `grammar` or `json_schema`, read as the server
    /// reads them), calling `on_text(piece)` with each piece as it is decoded (a piece that may
    /// start a stop string is held back); `on_text` returning `false` (or throwing) stops.
    /// Resolves to `{text, promptTokens, cachedTokens, generatedTokens, promptTps, generateTps,
    /// stop}`: of the prompt, `promptTokens` ran and `cachedTokens` were held in the cache from
    /// the last prompt; `stop` is `"eos"` (the model ended), `"stop"` (a stop string, cut before
    /// it), `"length"` or `"callback"`.
    pub async fn generate(
        &mut self,
        text: String,
        chat: bool,
        options: JsValue,
        on_text: Function,
    ) -> Result<JsValue, JsError> {
        let ids = self.inner.prompt_ids(&text, chat).map_err(js_err)?;
        self.run(&ids, &options, &on_text).await
    }

    /// Like `generate`, for a conversation: `messages` is an array of `{role, content}`
    /// (`system`, `user`, `assistant`), rendered with the model's chat template. The turns a
    /// previous call already ran stay in the cache: only the new ones run.
    #[wasm_bindgen(js_name = generateChat)]
    pub async fn generate_chat(
        &mut self,
        messages: js_sys::Array,
        options: JsValue,
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
        self.run(&ids, &options, &on_text).await
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
        options: &JsValue,
        on_text: &Function,
    ) -> Result<JsValue, JsError> {
        let (max_tokens, sampler) = generation_options(options)?;
        let grammar = grammar_option(options)?;
        let mut stops = StopMatcher::new(stop_strings(options)?);
        let mut out = String::new();
        // A callback that throws or returns `false` stops generation.
        let mut send = |text: &str| {
            out.push_str(text);
            text.is_empty()
                || on_text
                    .call1(&JsValue::NULL, &JsValue::from_str(text))
                    .map(|v| v.as_bool() != Some(false))
                    .unwrap_or(false)
        };
        let mut stopped = false;
        let stats = self
            .inner
            .generate(ids, max_tokens, sampler, grammar.as_ref(), |piece| {
                let r = stops.push(piece);
                stopped = r.stopped;
                send(&r.text) && !r.stopped
            })
            .await
            .map_err(js_err)?;
        // What a stop string's possible start held back goes out when none completed.
        if !stopped && stats.stop != StopReason::Callback {
            send(&stops.finish());
        }
        let obj = js_sys::Object::new();
        set(&obj, "text", out.into())?;
        set(&obj, "promptTokens", stats.prompt_tokens.into())?;
        set(&obj, "cachedTokens", self.inner.reused_tokens().into())?;
        set(&obj, "generatedTokens", stats.generated_tokens.into())?;
        set(&obj, "promptTps", stats.prompt_tps().into())?;
        set(&obj, "generateTps", stats.generate_tps().into())?;
        let stop = match stats.stop {
            _ if stopped => "stop",
            StopReason::EndOfGeneration => "eos",
            StopReason::Length => "length",
            StopReason::Callback => "callback",
        };
        set(&obj, "stop", stop.into())?;
        Ok(obj.into())
    }
}
