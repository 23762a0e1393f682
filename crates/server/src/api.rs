//! Request bodies of `/v1/chat/completions` and `/v1/completions`, checked field by field so that
//! every bad value is answered with an error naming the field (`param`) and the problem. Fields
//! this server does not use are ignored, as OpenAI clients send many.
//!
//! Sampling defaults are llama-server's (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05);
//! `max_tokens` defaults to what is left of the slot's context after the prompt.

use serde_json::Value;
use wgllm_models::sampler::SamplerConfig;
use wgllm_models::tokenizer::{ChatMessage, Tokenizer};

use crate::error::ApiError;
use crate::fields::{kind, Fields};
use crate::structured::{self, ToolUse};
use wgllm_structured::Grammar;

/// Which endpoint a body came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// Largest `top_logprobs` (chat) and `logprobs` (completions), as OpenAI.
const MAX_TOP_LOGPROBS_CHAT: i64 = 20;
const MAX_LOGPROBS_COMPLETION: i64 = 5;
/// Largest number of stop strings (OpenAI: 4).
const MAX_STOPS: usize = 4;

/// What generation a request asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with only `usage`.
    pub include_usage: bool,
    /// Log-probabilities of the chosen tokens with this many alternatives each.
    pub logprobs: Option<usize>,
}

/// A checked request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub endpoint: Endpoint,
    pub prompt: Vec<u32>,
    pub params: GenParams,
    /// What the output must follow (a schema, a grammar, a forced tool call), with the field
    /// that asked for it.
    pub grammar: Option<(&'static str, Grammar)>,
    /// Chat with tools: the reply is parsed for calls.
    pub tool_use: Option<ToolUse>,
}

/// What checking a request needs to know about the served model.
pub struct ModelInfo<'a> {
    pub id: &'a str,
    pub tokenizer: &'a Tokenizer,
    /// Context of one slot.
    pub n_ctx: usize,
}

/// Parses and checks `body`; `seed` is used when the request has none.
pub fn parse(
    endpoint: Endpoint,
    body: &[u8],
    model: &ModelInfo<'_>,
    seed: u64,
) -> Result<Request, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body is not valid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(ApiError::bad_request(format!(
            "The body must be a JSON object, got {}",
            kind(&value)
        )));
    };
    let f = Fields(&map);
    if let Some(name) = f.string("model")? {
        if name != model.id {
            return Err(ApiError::unknown_model(name, model.id));
        }
    }
    if let Some(n) = f.integer("n", i64::MIN, i64::MAX)? {
        if n != 1 {
            return Err(ApiError::bad_param(
                "n",
                format!("Only n = 1 is supported, got {n}"),
            ));
        }
    }
    let mut grammar = structured::output_grammar(&f)?;
    let (prompt, tool_use) = match endpoint {
        Endpoint::Chat => {
            let p = chat_prompt(&f, model.tokenizer)?;
            if let Some(g) = p.grammar {
                if grammar.is_some() {
                    return Err(ApiError::bad_param(
                        "tool_choice",
                        "a forced tool call and 'response_format' / 'grammar' / 'json_schema' both constrain the output: give one",
                    ));
                }
                grammar = Some(("tool_choice", g));
            }
            (p.ids, p.tool_use)
        }
        Endpoint::Completion => (completion_prompt(&f, model.tokenizer)?, None),
    };
    if prompt.is_empty() {
        return Err(ApiError::bad_param(
            if endpoint == Endpoint::Chat {
                "messages"
            } else {
                "prompt"
            },
            "The prompt has no tokens",
        ));
    }
    if prompt.len() >= model.n_ctx {
        return Err(ApiError::bad_param(
            if endpoint == Endpoint::Chat { "messages" } else { "prompt" },
            format!(
                "The prompt has {} tokens, but a slot's context holds {} (prompt and at least one generated token)",
                prompt.len(),
                model.n_ctx
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let room = model.n_ctx - prompt.len();
    let max_key = match endpoint {
        Endpoint::Chat if f.get("max_completion_tokens").is_some() => "max_completion_tokens",
        _ => "max_tokens",
    };
    let max_tokens = match f.integer(max_key, i64::MIN, i64::MAX)? {
        None => room,
        Some(m) if m < 1 => {
            return Err(ApiError::bad_param(
                max_key,
                format!("'{max_key}' must be at least 1, got {m}"),
            ))
        }
        Some(m) if m as u64 > room as u64 => {
            return Err(ApiError::bad_param(
                max_key,
                format!(
                    "'{max_key}' = {m} does not fit: the prompt has {} tokens and a slot's context holds {}, so at most {room} can be generated",
                    prompt.len(),
                    model.n_ctx
                ),
            )
            .with_code("context_length_exceeded"))
        }
        Some(m) => m as usize,
    };
    let d = SamplerConfig::default();
    let sampler = SamplerConfig {
        temperature: f.number("temperature", 0.0, 2.0)?.unwrap_or(d.temperature),
        top_k: f
            .integer("top_k", 0, i64::from(u32::MAX))?
            .map_or(d.top_k, |k| k as usize),
        top_p: f.number("top_p", 0.0, 1.0)?.unwrap_or(d.top_p),
        min_p: f.number("min_p", 0.0, 1.0)?.unwrap_or(d.min_p),
        repeat_penalty: f
            .number("repeat_penalty", 0.0, 10.0)?
            .unwrap_or(d.repeat_penalty),
        presence_penalty: f
            .number("presence_penalty", -2.0, 2.0)?
            .unwrap_or(d.presence_penalty),
        frequency_penalty: f
            .number("frequency_penalty", -2.0, 2.0)?
            .unwrap_or(d.frequency_penalty),
        seed: f
            .integer("seed", i64::MIN, i64::MAX)?
            .map_or(seed, |s| s as u64),
        ..d
    };
    if sampler.repeat_penalty == 0.0 {
        return Err(ApiError::bad_param(
            "repeat_penalty",
            "'repeat_penalty' must be positive",
        ));
    }
    let logprobs = match endpoint {
        Endpoint::Chat => {
            let on = f.boolean("logprobs")?.unwrap_or(false);
            let top = f.integer("top_logprobs", 0, MAX_TOP_LOGPROBS_CHAT)?;
            match (on, top) {
                (false, Some(_)) => {
                    return Err(ApiError::bad_param(
                        "top_logprobs",
                        "'top_logprobs' needs 'logprobs': true",
                    ))
                }
                (false, None) => None,
                (true, top) => Some(top.unwrap_or(0) as usize),
            }
        }
        Endpoint::Completion => f
            .integer("logprobs", 0, MAX_LOGPROBS_COMPLETION)?
            .map(|n| n as usize),
    };
    let stream = f.boolean("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => Fields(o).boolean("include_usage")?.unwrap_or(false),
        Some(v) => {
            return Err(ApiError::bad_param(
                "stream_options",
                format!("'stream_options' must be an object, got {}", kind(v)),
            ))
        }
    };
    Ok(Request {
        endpoint,
        prompt,
        params: GenParams {
            max_tokens,
            sampler,
            stop: stops(&f)?,
            stream,
            include_usage,
            logprobs,
        },
        grammar,
        tool_use,
    })
}

/// `stop`: a string or an array of at most four non-empty strings.
fn stops(f: &Fields<'_>) -> Result<Vec<String>, ApiError> {
    let bad = |why: String| ApiError::bad_param("stop", why);
    let list = match f.get("stop") {
        None => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(bad(format!(
                    "'stop' entries must be strings, got {}",
                    kind(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(bad(format!(
                "'stop' must be a string or an array of strings, got {}",
                kind(v)
            )))
        }
    };
    if list.len() > MAX_STOPS {
        return Err(bad(format!(
            "at most {MAX_STOPS} stop strings, got {}",
            list.len()
        )));
    }
    if list.iter().any(String::is_empty) {
        return Err(bad("stop strings must not be empty".into()));
    }
    Ok(list)
}

/// The conversation in `messages` (with the `tools`), rendered with the model's chat template
/// and tokenized.
fn chat_prompt(f: &Fields<'_>, tok: &Tokenizer) -> Result<structured::ToolPrompt, ApiError> {
    let bad = |why: String| ApiError::bad_param("messages", why);
    let list = match f.get("messages") {
        None => return Err(bad("'messages' is required".into())),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(bad("'messages' must not be empty".into()))
        }
        Some(Value::Array(a)) => a,
        Some(v) => return Err(bad(format!("'messages' must be an array, got {}", kind(v)))),
    };
    let mut messages = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let Value::Object(o) = m else {
            return Err(bad(format!(
                "messages[{i}] must be an object, got {}",
                kind(m)
            )));
        };
        let role = match o.get("role") {
            Some(Value::String(r))
                if ["system", "developer", "user", "assistant", "tool"].contains(&r.as_str()) =>
            {
                if r == "developer" {
                    "system"
                } else {
                    r.as_str()
                }
            }
            Some(Value::String(r)) => {
                return Err(bad(format!(
                "messages[{i}].role '{r}' is not one of system, developer, user, assistant, tool"
            )))
            }
            _ => return Err(bad(format!("messages[{i}].role must be a string"))),
        };
        let tool_calls = match o.get("tool_calls").filter(|v| !v.is_null()) {
            Some(v) if role == "assistant" => Some(structured::message_tool_calls(i, v)?),
            Some(_) => {
                return Err(bad(format!(
                    "messages[{i}]: only an assistant message has 'tool_calls'"
                )))
            }
            None => None,
        };
        let content = match o.get("content") {
            Some(Value::String(s)) => s.clone(),
            // An assistant's turn that only calls tools has no content.
            None | Some(Value::Null) if tool_calls.is_some() => String::new(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => text.push_str(t),
                        _ => {
                            return Err(bad(format!(
                                "messages[{i}].content parts must be {{\"type\": \"text\", \"text\": string}}"
                            )))
                        }
                    }
                }
                text
            }
            _ => {
                return Err(bad(format!(
                    "messages[{i}].content must be a string or an array of text parts"
                )))
            }
        };
        let mut m = ChatMessage::new(role, content);
        m.tool_calls = tool_calls;
        if role == "tool" {
            m.tool_call_id = o
                .get("tool_call_id")
                .and_then(Value::as_str)
                .map(String::from);
        }
        messages.push(m);
    }
    structured::render(tok, messages, structured::tools(f)?)
}

/// `prompt`: a string (BOS added where the model wants it), an array of one string, or an array
/// of token ids.
fn completion_prompt(f: &Fields<'_>, tok: &Tokenizer) -> Result<Vec<u32>, ApiError> {
    let bad = |why: String| ApiError::bad_param("prompt", why);
    let encode = |s: &str| {
        tok.encode(s, true)
            .map_err(|e| bad(format!("the prompt could not be tokenized: {e}")))
    };
    match f.get("prompt") {
        None => Err(bad("'prompt' is required".into())),
        Some(Value::String(s)) => encode(s),
        Some(Value::Array(a)) => match &a[..] {
            [Value::String(s)] => encode(s),
            ids if !ids.is_empty() && ids.iter().all(Value::is_u64) => ids
                .iter()
                .map(|v| {
                    let id = v.as_u64().unwrap_or(u64::MAX);
                    if id < tok.vocab_size() as u64 {
                        Ok(id as u32)
                    } else {
                        Err(bad(format!(
                            "token id {id} is outside the vocabulary of {}",
                            tok.vocab_size()
                        )))
                    }
                })
                .collect(),
            _ => Err(bad(
                "'prompt' must be a string, an array of one string, or an array of token ids"
                    .into(),
            )),
        },
        Some(v) => Err(bad(format!("'prompt' must be a string, got {}", kind(v)))),
    }
}
