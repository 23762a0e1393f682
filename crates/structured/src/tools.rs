//! Tool calling: how a model is told of its tools, how it writes a call, the grammar that
//! forces a call (`tool_choice` `required` or a named function), and the parser that turns its
//! text back into OpenAI `tool_calls`.
//!
//! Formats, chosen from the chat template:
//! - [`ToolFormat::Hermes`]: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, one
//!   block per call: Qwen2.5/Qwen3 and Hermes templates render the tools themselves; for a
//!   template that cannot render tools (SmolLM2's, plain ChatML) a system message in the same
//!   words Qwen's template uses lists them.
//! - [`ToolFormat::Llama3Json`]: Llama 3.1/3.2's JSON tool calling, one
//!   `{"name": …, "parameters": {…}}` object as the whole reply (after `<|python_tag|>` when
//!   the model writes one).

use serde_json::{json, Map, Value};

use crate::Grammar;

/// A function the model may call (OpenAI's `tools[].function`).
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema of the arguments object.
    pub parameters: Value,
}

impl Tool {
    /// The tool as OpenAI's request spells it: `{"type": "function", "function": {…}}`.
    pub fn to_openai(&self) -> Value {
        let mut f = json!({"name": self.name, "parameters": self.parameters});
        if let Some(d) = &self.description {
            f["description"] = json!(d);
        }
        json!({"type": "function", "function": f})
    }
}

/// Whether and which tool the model must call.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No call: tools are not shown.
    None,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// A call the model made.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments object as JSON text (OpenAI sends it as a string).
    pub arguments: String,
}

/// How a model writes its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3Json,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolFormat {
    /// The format a chat template's model was trained on: Llama 3's where the template speaks
    /// of `ipython` with Llama 3's headers, else Hermes' `<tool_call>` blocks.
    pub fn of_template(template: &str) -> ToolFormat {
        if template.contains("<|start_header_id|>") && template.contains("ipython") {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Hermes
        }
    }
}

/// Whether a chat template renders the `tools` it is given (else [`system_prompt`] says them).
pub fn template_renders_tools(template: &str) -> bool {
    template.contains("tools")
}

/// The system message that tells a model whose template cannot render tools what it has and
/// how to call it, in Hermes' words (as Qwen2.5's template writes them).
pub fn system_prompt(tools: &[Tool]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&t.to_openai().to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// The JSON schema of one call of `t` in `format`.
fn call_schema(format: ToolFormat, t: &Tool) -> Value {
    let args = match format {
        ToolFormat::Hermes => "arguments",
        ToolFormat::Llama3Json => "parameters",
    };
    let params = match &t.parameters {
        Value::Object(o) if !o.is_empty() => t.parameters.clone(),
        _ => json!({"type": "object"}),
    };
    json!({
        "type": "object",
        "properties": {"name": {"const": t.name}, args: params},
        "required": ["name", args],
        "additionalProperties": false,
    })
}

/// The grammar that forces a call when `choice` asks for one (`None` for `auto` and `none`):
/// one call of any tool (or of the named one), or with `parallel` one or more.
pub fn grammar(
    format: ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
) -> Option<Grammar> {
    let chosen: Vec<&Tool> = match choice {
        ToolChoice::Auto | ToolChoice::None => return None,
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(n) => tools.iter().filter(|t| t.name == *n).collect(),
    };
    let schemas: Vec<Value> = chosen.iter().map(|t| call_schema(format, t)).collect();
    let body = match &schemas[..] {
        [one] => one.clone(),
        _ => json!({"anyOf": schemas}),
    };
    Some(match format {
        ToolFormat::Hermes => {
            let repeat = if parallel { "(\"\\n\" call)*" } else { "" };
            Grammar::Lark(format!(
                "start: call {repeat}\ncall: \"{OPEN}\\n\" body \"\\n{CLOSE}\"\nbody: %json {body}\n"
            ))
        }
        ToolFormat::Llama3Json => Grammar::JsonSchema(body),
    })
}

/// The reply's text split into its content (what is left, trimmed; `None` when empty) and the
/// calls it makes. Text that looks like a call but does not parse stays content.
pub fn parse(format: ToolFormat, text: &str) -> (Option<String>, Vec<ToolCall>) {
    let content = |s: &str| {
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    };
    match format {
        ToolFormat::Hermes => {
            let mut calls = Vec::new();
            let mut rest = String::new();
            let mut s = text;
            while let Some(a) = s.find(OPEN) {
                let after = &s[a + OPEN.len()..];
                let Some(b) = after.find(CLOSE) else { break };
                match call_of(&after[..b], "arguments") {
                    Some(c) => {
                        rest.push_str(&s[..a]);
                        calls.push(c);
                    }
                    None => rest.push_str(&s[..a + OPEN.len() + b + CLOSE.len()]),
                }
                s = &after[b + CLOSE.len()..];
            }
            rest.push_str(s);
            (content(&rest), calls)
        }
        ToolFormat::Llama3Json => {
            let body = text.trim().trim_start_matches(PYTHON_TAG).trim();
            match call_of(body, "parameters").or_else(|| call_of(body, "arguments")) {
                Some(c) => (None, vec![c]),
                None => (content(text), vec![]),
            }
        }
    }
}

/// `{"name": string, ARGS: object}` as a call.
fn call_of(json_text: &str, args: &str) -> Option<ToolCall> {
    let v: Map<String, Value> = serde_json::from_str(json_text.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get(args) {
        Some(a @ Value::Object(_)) => a.to_string(),
        // Some models write the arguments as a JSON string.
        Some(Value::String(s)) if serde_json::from_str::<Map<String, Value>>(s).is_ok() => {
            s.clone()
        }
        None => "{}".to_string(),
        _ => return None,
    };
    Some(ToolCall { name, arguments })
}

/// Splits a streamed reply as it comes: text that cannot be part of a call goes out at once,
/// a call is held until it is whole (then given as a [`ToolCall`]).
pub struct StreamSplitter {
    format: ToolFormat,
    /// Text held back: a possible start of a call, or a call not yet closed.
    held: String,
    /// Llama 3: the reply began as JSON, so all of it is held to the end.
    whole: bool,
    /// Nothing but whitespace came yet.
    at_start: bool,
}

/// What [`StreamSplitter::push`] lets out.
#[derive(Debug, Default, PartialEq)]
pub struct Split {
    pub text: String,
    pub calls: Vec<ToolCall>,
}

impl StreamSplitter {
    pub fn new(format: ToolFormat) -> StreamSplitter {
        StreamSplitter {
            format,
            held: String::new(),
            whole: false,
            at_start: true,
        }
    }

    /// Takes the next piece of text.
    pub fn push(&mut self, piece: &str) -> Split {
        self.held.push_str(piece);
        match self.format {
            ToolFormat::Llama3Json => {
                if self.at_start {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        return Split::default();
                    }
                    self.at_start = false;
                    self.whole = t.starts_with('{')
                        || t.starts_with(PYTHON_TAG)
                        || PYTHON_TAG.starts_with(t);
                }
                if self.whole {
                    return Split::default();
                }
                Split {
                    text: std::mem::take(&mut self.held),
                    calls: vec![],
                }
            }
            ToolFormat::Hermes => self.hermes(false),
        }
    }

    /// The end of the reply: what is still held, parsed.
    pub fn finish(&mut self) -> Split {
        match self.format {
            ToolFormat::Llama3Json => {
                let held = std::mem::take(&mut self.held);
                if !self.whole {
                    return Split {
                        text: held,
                        calls: vec![],
                    };
                }
                let (text, calls) = parse(self.format, &held);
                Split {
                    text: text.unwrap_or_default(),
                    calls,
                }
            }
            ToolFormat::Hermes => self.hermes(true),
        }
    }

    fn hermes(&mut self, end: bool) -> Split {
        let mut out = Split::default();
        loop {
            match self.held.find(OPEN) {
                Some(a) => {
                    let Some(b) = self.held[a..].find(CLOSE) else {
                        out.text.push_str(&self.held[..a]);
                        self.held.drain(..a);
                        if end {
                            out.text.push_str(&std::mem::take(&mut self.held));
                        }
                        return out;
                    };
                    let close = a + b + CLOSE.len();
                    let block: String = self.held.drain(..close).collect();
                    // The text before a call keeps its own spacing; a call that does not parse
                    // stays text.
                    match call_of(
                        &block[a + OPEN.len()..block.len() - CLOSE.len()],
                        "arguments",
                    ) {
                        Some(call) => {
                            out.text.push_str(&block[..a]);
                            out.calls.push(call);
                        }
                        None => out.text.push_str(&block),
                    }
                }
                None => {
                    // Hold back a tail that may be the start of `<tool_call>`.
                    let keep = if end {
                        0
                    } else {
                        partial_suffix(&self.held, OPEN)
                    };
                    let cut = self.held.len() - keep;
                    out.text.push_str(&self.held[..cut]);
                    self.held.drain(..cut);
                    return out;
                }
            }
        }
    }
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("The weather in a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }
    }

    #[test]
    fn hermes_calls_parse_out_of_the_text() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
        let (content, calls) = parse(ToolFormat::Hermes, text);
        assert_eq!(content.as_deref(), Some("Let me look."));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].name, "get_weather");
        let args: Value = serde_json::from_str(&calls[1].arguments).unwrap();
        assert_eq!(args, json!({"city": "Rome"}));
        // Not JSON inside the tags: all of it stays text.
        let (content, calls) = parse(ToolFormat::Hermes, "<tool_call>oops</tool_call>");
        assert_eq!(content.as_deref(), Some("<tool_call>oops</tool_call>"));
        assert!(calls.is_empty());
    }

    #[test]
    fn llama3_json_call() {
        let (c, calls) = parse(
            ToolFormat::Llama3Json,
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
        );
        assert_eq!(c, None);
        assert_eq!(calls[0].arguments, "{\"city\":\"Oslo\"}");
        let (c, calls) = parse(ToolFormat::Llama3Json, "It is sunny.");
        assert_eq!(c.as_deref(), Some("It is sunny."));
        assert!(calls.is_empty());
    }

    #[test]
    fn the_splitter_holds_only_what_may_be_a_call() {
        let text = "Sure <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call> done <tool";
        // Every way of cutting the text into pieces gives the same text and calls.
        for step in [1, 2, 3, 7, 500] {
            let mut sp = StreamSplitter::new(ToolFormat::Hermes);
            let mut all = Split::default();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(step) {
                let s = sp.push(&piece.iter().collect::<String>());
                all.text.push_str(&s.text);
                all.calls.extend(s.calls);
            }
            let s = sp.finish();
            all.text.push_str(&s.text);
            all.calls.extend(s.calls);
            assert_eq!(all.text, "Sure  done <tool", "step {step}");
            assert_eq!(all.calls.len(), 1);
            assert_eq!(all.calls[0].arguments, "{\"city\":\"Paris\"}");
        }
    }

    #[test]
    fn forcing_grammars() {
        let tools = [weather()];
        assert_eq!(
            grammar(ToolFormat::Hermes, &tools, &ToolChoice::Auto, true),
            None
        );
        let Some(Grammar::Lark(g)) =
            grammar(ToolFormat::Hermes, &tools, &ToolChoice::Required, false)
        else {
            panic!("a Lark grammar")
        };
        assert!(g.contains("\"<tool_call>\\n\" body"), "{g}");
        assert!(g.contains("\"const\":\"get_weather\""), "{g}");
        let Some(Grammar::JsonSchema(s)) = grammar(
            ToolFormat::Llama3Json,
            &tools,
            &ToolChoice::Named("get_weather".into()),
            false,
        ) else {
            panic!("a schema")
        };
        assert_eq!(s["required"], json!(["name", "parameters"]));
        assert!(system_prompt(&tools).contains("\"name\":\"get_weather\""));
    }
}
