//! The structured-output and tool fields of a request, checked as `api` checks the rest:
//! OpenAI's `response_format` (`text`, `json_object`, `json_schema`), llama-server's `grammar`
//! (GBNF, or Lark after a `%llguidance` line) and `json_schema`, and for chat `tools`,
//! `tool_choice` and `parallel_tool_calls` with the messages of tool turns (an assistant's
//! `tool_calls`, role `tool`).

use serde_json::{json, Map, Value};
use wgllm_models::tokenizer::{ChatMessage, Tokenizer};
use wgllm_structured::tools::{self, Tool, ToolChoice, ToolFormat};
use wgllm_structured::{request, Grammar};

use crate::error::ApiError;
use crate::fields::{kind, Fields};

/// How a chat request uses tools: the reply is parsed for calls in `format`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolUse {
    pub format: ToolFormat,
}

/// Most tools one request may give.
const MAX_TOOLS: usize = 128;

/// The grammar the output must follow, from `response_format`, `grammar` or `json_schema` (at
/// most one of them), with the field that gave it.
pub(crate) fn output_grammar(f: &Fields<'_>) -> Result<Option<(&'static str, Grammar)>, ApiError> {
    request::output_grammar(|k| f.get(k)).map_err(|e| ApiError::bad_param(e.param, e.message))
}

/// The checked `tools`, `tool_choice` and `parallel_tool_calls` of a chat request.
pub(crate) struct Tools {
    pub list: Vec<Tool>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

/// `tools` and what goes with them; `None` without tools (or with `tool_choice: none`).
pub(crate) fn tools(f: &Fields<'_>) -> Result<Option<Tools>, ApiError> {
    let list = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| tool(i, t))
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ApiError::bad_param(
                "tools",
                format!("'tools' must be an array, got {}", kind(v)),
            ))
        }
    };
    if list.len() > MAX_TOOLS {
        return Err(ApiError::bad_param(
            "tools",
            format!("at most {MAX_TOOLS} tools, got {}", list.len()),
        ));
    }
    let choice = match f.get("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!("'tool_choice' '{s}' is not one of auto, none, required, or {{\"type\": \"function\", \"function\": {{\"name\": …}}}}"),
                ))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(n) => ToolChoice::Named(n.to_string()),
            None => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    "'tool_choice' must be auto, none, required, or {\"type\": \"function\", \"function\": {\"name\": …}}",
                ))
            }
        },
    };
    if let ToolChoice::Named(n) = &choice {
        if !list.iter().any(|t| t.name == *n) {
            return Err(ApiError::bad_param(
                "tool_choice",
                format!("'tool_choice' names the function '{n}', which is not in 'tools'"),
            ));
        }
    }
    if list.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(ApiError::bad_param(
            "tool_choice",
            "'tool_choice' asks for a call, but 'tools' is empty",
        ));
    }
    let parallel = f.boolean("parallel_tool_calls")?.unwrap_or(true);
    if list.is_empty() || choice == ToolChoice::None {
        return Ok(None);
    }
    Ok(Some(Tools {
        list,
        choice,
        parallel,
    }))
}

fn tool(i: usize, t: &Value) -> Result<Tool, ApiError> {
    let bad = |why: String| ApiError::bad_param("tools", format!("tools[{i}]: {why}"));
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(bad("'type' must be \"function\"".into()));
    }
    let Some(Value::Object(f)) = t.get("function") else {
        return Err(bad("'function' must be an object".into()));
    };
    let name = match f.get("name") {
        Some(Value::String(n))
            if !n.is_empty()
                && n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
        {
            n.clone()
        }
        _ => {
            return Err(bad(
                "'function.name' must be 1 to 64 letters, digits, '_' or '-'".into(),
            ))
        }
    };
    let description = match f.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(bad("'function.description' must be a string".into())),
    };
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(bad(
                "'function.parameters' must be a JSON schema object".into()
            ))
        }
    };
    Ok(Tool {
        name,
        description,
        parameters,
    })
}

/// The messages and tools as the template renders them, the grammar that forces a call, and
/// how the reply is to be parsed.
pub(crate) struct ToolPrompt {
    pub ids: Vec<u32>,
    pub grammar: Option<Grammar>,
    pub tool_use: Option<ToolUse>,
}

/// Renders `messages` with `tools`: a template that renders tools gets them as `tools`; for
/// one that cannot, the tools are said in a system message, earlier calls written back as
/// `<tool_call>` blocks and tool answers as `<tool_response>` user turns, as Qwen's template
/// writes them.
pub(crate) fn render(
    tok: &Tokenizer,
    mut messages: Vec<ChatMessage>,
    tools: Option<Tools>,
) -> Result<ToolPrompt, ApiError> {
    let bad = |why: String| ApiError::bad_param("messages", why);
    let render_err = |e: wgllm_models::tokenizer::TokenizerError| {
        bad(format!(
            "the messages could not be rendered and tokenized: {e}"
        ))
    };
    let template = tok.effective_chat_template().map_err(render_err)?;
    let native = tools::template_renders_tools(template);
    let format = ToolFormat::of_template(template);
    if !native {
        messages = messages.into_iter().map(written_back).collect();
    }
    let Some(t) = tools else {
        let ids = tok.chat_ids(&messages).map_err(render_err)?;
        return Ok(ToolPrompt {
            ids,
            grammar: None,
            tool_use: None,
        });
    };
    let ids = if native {
        let list: Vec<Value> = t.list.iter().map(Tool::to_openai).collect();
        tok.chat_ids_with_tools(&messages, Some(&Value::Array(list)))
    } else {
        let said = tools::system_prompt(&t.list);
        match messages.first_mut() {
            Some(m) if m.role == "system" => m.content = format!("{}\n\n{said}", m.content),
            _ => messages.insert(0, ChatMessage::new("system", said)),
        }
        tok.chat_ids(&messages)
    }
    .map_err(render_err)?;
    Ok(ToolPrompt {
        ids,
        grammar: tools::grammar(format, &t.list, &t.choice, t.parallel),
        tool_use: Some(ToolUse { format }),
    })
}

/// A tool turn spelled for a template that knows nothing of tools.
fn written_back(mut m: ChatMessage) -> ChatMessage {
    if let Some(Value::Array(calls)) = m.tool_calls.take() {
        for c in calls {
            let f = c.get("function").cloned().unwrap_or(Value::Null);
            let call = json!({"name": f.get("name"), "arguments": f.get("arguments")});
            m.content
                .push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
        }
        m.content = m.content.trim_start().to_string();
    }
    if m.role == "tool" {
        m.role = "user".into();
        m.content = format!("<tool_response>\n{}\n</tool_response>", m.content);
        m.tool_call_id = None;
    }
    m
}

/// An assistant message's `tool_calls`, checked, their arguments as objects (templates index
/// into them); `i` is the message's index.
pub(crate) fn message_tool_calls(i: usize, v: &Value) -> Result<Value, ApiError> {
    let bad =
        |why: String| ApiError::bad_param("messages", format!("messages[{i}].tool_calls: {why}"));
    let Value::Array(calls) = v else {
        return Err(bad("must be an array".into()));
    };
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let (Some(name), args) = (
            c.pointer("/function/name").and_then(Value::as_str),
            c.pointer("/function/arguments"),
        ) else {
            return Err(bad("each call needs 'function.name'".into()));
        };
        let arguments = match args {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| bad(format!("the arguments of '{name}' are not a JSON object")))?,
            Some(o @ Value::Object(_)) => o.clone(),
            Some(_) => return Err(bad(format!("the arguments of '{name}' must be a string"))),
        };
        let mut call =
            json!({"type": "function", "function": {"name": name, "arguments": arguments}});
        if let Some(id) = c.get("id").and_then(Value::as_str) {
            call["id"] = json!(id);
        }
        out.push(call);
    }
    Ok(Value::Array(out))
}
