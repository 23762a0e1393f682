//! The fields of a request that constrain its output, as the server and the browser take them:
//! OpenAI's `response_format` (`text`, `json_object`, `json_schema`), llama-server's `grammar`
//! (GBNF, or Lark after a `%llguidance` line) and `json_schema`; at most one of them.

use serde_json::Value;

use crate::Grammar;

/// A field that is not what it must be: its name and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub param: &'static str,
    pub message: String,
}

impl FieldError {
    fn new(param: &'static str, message: String) -> FieldError {
        FieldError { param, message }
    }
}

/// What kind of JSON value `v` is, for error messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The grammar the output must follow, with the field that gave it, from the request's fields
/// (`get(name)`: the field's value, `None` when absent or null).
pub fn output_grammar<'a>(
    get: impl Fn(&str) -> Option<&'a Value>,
) -> Result<Option<(&'static str, Grammar)>, FieldError> {
    let mut found: Vec<(&'static str, Grammar)> = Vec::new();
    if let Some(v) = get("response_format") {
        if let Some(g) = response_format(v)? {
            found.push(("response_format", g));
        }
    }
    if let Some(v) = get("grammar") {
        let Value::String(s) = v else {
            return Err(FieldError::new(
                "grammar",
                format!("'grammar' must be a string, got {}", kind(v)),
            ));
        };
        let g = match s.trim_start().strip_prefix("%llguidance") {
            Some(rest) => {
                let body = rest.split_once('\n').map_or("", |(_, b)| b);
                Grammar::Lark(body.to_string())
            }
            None => Grammar::Gbnf(s.clone()),
        };
        found.push(("grammar", g));
    }
    if let Some(v) = get("json_schema") {
        found.push(("json_schema", schema_of("json_schema", v)?));
    }
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(FieldError::new(
            found[1].0,
            format!(
                "'{}' and '{}' both constrain the output: give one",
                found[0].0, found[1].0
            ),
        )),
    }
}

/// `response_format`: `{"type": "text" | "json_object" | "json_schema", …}`.
fn response_format(v: &Value) -> Result<Option<Grammar>, FieldError> {
    let p = "response_format";
    let bad = |why: String| FieldError::new(p, why);
    let Value::Object(o) = v else {
        return Err(bad(format!("'{p}' must be an object, got {}", kind(v))));
    };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        // llama-server also takes a schema beside `json_object`.
        Some("json_object") => match o.get("schema") {
            Some(s) => Ok(Some(schema_of(p, s)?)),
            None => Ok(Some(Grammar::JsonObject)),
        },
        Some("json_schema") => {
            let Some(Value::Object(js)) = o.get("json_schema") else {
                return Err(bad(
                    "'response_format.json_schema' must be an object with a 'schema'".into(),
                ));
            };
            match js.get("schema") {
                Some(s) => Ok(Some(schema_of(p, s)?)),
                None => Ok(Some(Grammar::JsonObject)),
            }
        }
        Some(t) => Err(bad(format!(
            "'{p}.type' '{t}' is not one of text, json_object, json_schema"
        ))),
        None => Err(bad(format!("'{p}.type' must be a string"))),
    }
}

fn schema_of(param: &'static str, v: &Value) -> Result<Grammar, FieldError> {
    match v {
        Value::Object(_) | Value::Bool(_) => Ok(Grammar::JsonSchema(v.clone())),
        _ => Err(FieldError::new(
            param,
            format!("a JSON schema must be an object, got {}", kind(v)),
        )),
    }
}
