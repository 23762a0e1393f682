//! Structured output and tool calling through a real server on loopback, over the tiny synthetic
//! llama on the CPU backend: its random weights would write anything, so what comes back is what
//! the grammar allowed and nothing else. `response_format` (json_object, json_schema), `grammar`
//! (GBNF) and `json_schema` in chat and completions, streamed and not; `tools` with
//! `tool_choice` required and named, parsed into `tool_calls` and streamed as their deltas; a
//! second turn carrying the tool's answer; constrained and free requests sharing the slots; and
//! each malformed field refused with a 400 naming it.

use serde_json::{json, Value};

use crate::common;

const SCHEMA: &str = r#"{
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "ok": {"type": "boolean"}
    },
    "required": ["name", "age", "ok"],
    "additionalProperties": false
}"#;

/// Whether `v` is what [`SCHEMA`] allows.
fn fits_schema(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let name = o["name"].as_str().is_some_and(|n| n.chars().count() <= 6);
    let age = o["age"].as_i64().is_some_and(|a| (0..=120).contains(&a));
    o.len() == 3 && name && age && o["ok"].is_boolean()
}

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 8},
                "unit": {"enum": ["c", "f"]}
            },
            "required": ["city", "unit"],
            "additionalProperties": false
        }
    }})
}

fn clock() -> Value {
    json!({"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]
    }}})
}

fn chat(content: &str, seed: u64) -> Value {
    json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 160,
        "temperature": 0.9,
        "seed": seed,
    })
}

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_follows_response_format_grammar_and_json_schema() {
    let s = common::serve(common::tiny_app(2, 512), common::serial().await).await;
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    for seed in 0..4 {
        let mut b = chat("a person", seed);
        b["response_format"] = json!({"type": "json_schema",
            "json_schema": {"name": "person", "schema": schema, "strict": true}});
        let (status, v) = s.post("/v1/chat/completions", &b).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let out: Value = serde_json::from_str(content(&v)).unwrap();
        assert!(fits_schema(&out), "{out}");
    }
    let mut b = chat("anything", 7);
    b["response_format"] = json!({"type": "json_object"});
    let (status, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(status, 200, "{v}");
    if v["choices"][0]["finish_reason"] == "stop" {
        let out: Value = serde_json::from_str(content(&v)).unwrap();
        assert!(out.is_object(), "{out}");
    } else {
        assert!(content(&v).trim_start().starts_with('{'), "{v}");
    }

    // llama-server's fields on completions: a GBNF grammar, and a schema streamed.
    let gbnf = r#"root ::= answer " " digit{2}
answer ::= "yes" | "no"
digit ::= [0-9]"#;
    for seed in 0..3 {
        let b = json!({"prompt": "well?", "grammar": gbnf, "max_tokens": 20, "seed": seed,
            "temperature": 1.0});
        let (status, v) = s.post("/v1/completions", &b).await;
        assert_eq!(status, 200, "{v}");
        let text = v["choices"][0]["text"].as_str().unwrap();
        let (answer, digits) = text.split_once(' ').unwrap();
        assert!(matches!(answer, "yes" | "no"), "{text:?}");
        assert!(
            digits.len() == 2 && digits.bytes().all(|c| c.is_ascii_digit()),
            "{text:?}"
        );
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
    let b = json!({"prompt": "who?", "json_schema": schema, "max_tokens": 160, "seed": 3,
        "stream": true});
    let chunks = s.stream("/v1/completions", &b).await.collect().await;
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    let out: Value = serde_json::from_str(&text).unwrap();
    assert!(fits_schema(&out), "{out}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    // Constrained and free requests at once, in the two slots: each gets what it asked for.
    let (client, base) = (s.client.clone(), s.base.clone());
    let free = tokio::spawn(async move {
        let b = json!({"prompt": "the sea", "max_tokens": 24, "temperature": 0});
        let r = client
            .post(format!("{base}/v1/completions"))
            .json(&b)
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()
    });
    let mut b = chat("a person", 11);
    b["response_format"] = json!({"type": "json_schema", "json_schema": {"schema": schema}});
    let (status, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(status, 200, "{v}");
    assert!(fits_schema(&serde_json::from_str(content(&v)).unwrap()));
    let free = free.await.unwrap();
    assert!(free["choices"][0]["text"].is_string(), "{free}");
    assert!(s.metric("wgllm_requests_total").await >= 11.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_forced_parsed_and_streamed() {
    let s = common::serve(common::tiny_app(1, 2048), common::serial().await).await;
    let mut b = chat("weather in Oslo?", 5);
    b["tools"] = json!([weather(), clock()]);
    b["tool_choice"] = json!("required");
    b["parallel_tool_calls"] = json!(false);
    let (status, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert!(choice["message"]["content"].is_null(), "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
    let name = call["function"]["name"].as_str().unwrap();
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    match name {
        "get_weather" => {
            assert!(args["city"].as_str().unwrap().chars().count() <= 8);
            assert!(matches!(args["unit"].as_str(), Some("c" | "f")), "{args}");
        }
        "get_time" => assert!(matches!(args["zone"].as_str(), Some("utc" | "cet"))),
        _ => panic!("a call to {name}"),
    }

    // The same request streamed: the deltas add up to the same call (same seed, same tokens).
    b["stream"] = json!(true);
    let chunks = s.stream("/v1/chat/completions", &b).await.collect().await;
    let (mut sname, mut sargs) = (String::new(), String::new());
    for c in &chunks {
        for d in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(d["index"], 0, "{d}");
            sname += d["function"]["name"].as_str().unwrap_or("");
            sargs += d["function"]["arguments"].as_str().unwrap_or("");
        }
    }
    assert_eq!(sname, name);
    assert_eq!(serde_json::from_str::<Value>(&sargs).unwrap(), args);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );

    // A named function is the one called.
    let mut b = chat("what time is it?", 9);
    b["tools"] = json!([weather(), clock()]);
    b["tool_choice"] = json!({"type": "function", "function": {"name": "get_time"}});
    let (status, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(status, 200, "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert!(!calls.is_empty());
    assert!(calls.iter().all(|c| c["function"]["name"] == "get_time"));

    // The second turn: the call and the tool's answer go back in, and the reply is words.
    let b = json!({
        "messages": [
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "{\"sky\": \"clear\"}"}
        ],
        "tools": [weather()],
        "tool_choice": "none",
        "max_tokens": 8,
        "temperature": 0,
    });
    let (status, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 20, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_constraints_and_tools_are_400_naming_the_field() {
    let s = common::serve(common::tiny_app(1, 2048), common::serial().await).await;
    let ok = chat("hi", 0);
    let with = |fields: Value| {
        let mut b = ok.clone();
        for (k, v) in fields.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (fields, param, says) in [
        (
            json!({"response_format": {"type": "yaml"}}),
            "response_format",
            "not one of",
        ),
        (
            json!({"response_format": "json"}),
            "response_format",
            "must be an object",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "objekt"}}}}),
            "response_format",
            "objekt",
        ),
        (json!({"grammar": "root ::= missing"}), "grammar", "missing"),
        (json!({"grammar": 5}), "grammar", "must be a string"),
        (
            json!({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}),
            "grammar",
            "both constrain",
        ),
        (json!({"tools": {}}), "tools", "must be an array"),
        (
            json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
            "tools",
            "tools[0]",
        ),
        (
            json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
            "nope",
        ),
        (
            json!({"tools": [weather()], "tool_choice": "always"}),
            "tool_choice",
            "always",
        ),
        (
            json!({"tool_choice": "required"}),
            "tool_choice",
            "'tools' is empty",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "[1"}}]}]}),
            "messages",
            "not a JSON object",
        ),
    ] {
        let (status, v) = s.post("/v1/chat/completions", &with(fields.clone())).await;
        assert_eq!(status, 400, "{fields}: {v}");
        assert_eq!(v["error"]["param"], param, "{fields}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(says), "{fields}: {msg}");
    }
    let (status, v) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "x", "json_schema": [1]}),
        )
        .await;
    assert_eq!((status, &v["error"]["param"]), (400, &json!("json_schema")));
    // Still serving.
    let (status, v) = s.post("/v1/chat/completions", &ok).await;
    assert_eq!(status, 200, "{v}");
}
