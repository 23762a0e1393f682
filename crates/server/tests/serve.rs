//! `wgllm-server` end to end: a real server on loopback driven by a real HTTP client.
//!
//! With SmolLM2 on the WebGPU backend (lavapipe in CI): chat with and without streaming,
//! completions with log-probabilities and a stop string, two clients at once getting what each
//! gets alone (greedy) in shared steps, every kind of bad input answered with an OpenAI-style
//! error while the server keeps serving, a full queue answered 503 (then a shutdown ending the
//! request that filled it), and a client leaving mid-stream freeing its slot. They need SmolLM2
//! in the model cache, so they are ignored by default: `wgllm pull smollm2`, then
//! `cargo test -p wgllm-server --test serve -- --ignored` (CI runs them in its real-model
//! stage). Generations are kept short (≤ 16 tokens) for lavapipe.
//!
//! With a tiny synthetic llama on the CPU backend: shutting down (what Ctrl-C does to
//! `wgllm serve`) with requests in flight: the streamed request in the one slot and the requests
//! waiting behind it end at once with the 503 `server_shutting_down` (an error chunk, then
//! `[DONE]`, when streamed), `serve` returns, and the port takes no new connection.
//!
//! Structured output and tool calling over the tiny llama: `structured`; the server under abuse
//! (API key, origins, timeouts, faulty backends, hostile templates): `hardening`.

mod common;
#[path = "serve/hardening.rs"]
mod hardening;
#[path = "serve/structured.rs"]
mod structured;

use common::{chat, start, MODEL_ID};
use serde_json::{json, Value};

const QUESTION: &str = "What is the capital of France?";

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs SmolLM2 in the model cache"]
async fn smollm2_chat_streaming_completions_and_endpoints() {
    let s = start(2, 4, 256, 1 << 20).await;
    let (status, health) = s.get("/health").await;
    assert_eq!((status, health.as_str()), (200, r#"{"status":"ok"}"#));
    let (_, models) = s.get("/v1/models").await;
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], MODEL_ID);

    // Non-streaming chat.
    let (status, a) = s.post("/v1/chat/completions", &chat(QUESTION, 12)).await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(a["object"], "chat.completion");
    assert_eq!(a["choices"][0]["message"]["role"], "assistant");
    let answer = content(&a).to_string();
    assert!(answer.contains("Paris"), "{answer}");
    let usage = &a["usage"];
    let done = usage["completion_tokens"].as_u64().unwrap();
    assert!((1..=12).contains(&done), "{usage}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap() + done)
    );

    // The same question streamed: a role chunk, content deltas adding up to the same answer, a
    // last chunk with finish_reason and usage, then [DONE].
    let mut body = chat(QUESTION, 12);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let chunks = s
        .stream("/v1/chat/completions", &body)
        .await
        .collect()
        .await;
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, answer);
    let last = &chunks[chunks.len() - 2];
    assert_eq!(
        last["choices"][0]["finish_reason"],
        a["choices"][0]["finish_reason"]
    );
    assert!(
        last.get("usage").is_none(),
        "with include_usage, usage comes alone: {last}"
    );
    let usage_only = &chunks[chunks.len() - 1];
    assert_eq!(usage_only["choices"], json!([]));
    // The same prompt again found its slot's cache: all of it but the last token was kept,
    // and the answer is the same.
    let mut again = usage.clone();
    again["prompt_tokens_details"]["cached_tokens"] =
        json!(usage["prompt_tokens"].as_u64().unwrap() - 1);
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"], 0,
        "{usage}"
    );
    assert_eq!(usage_only["usage"], again);

    // Completions with log-probabilities of the two best alternatives.
    let body = json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "logprobs": 2});
    let (status, c) = s.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["object"], "text_completion");
    let lp = &c["choices"][0]["logprobs"];
    let n = c["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(lp["tokens"].as_array().unwrap().len(), n, "{lp}");
    assert_eq!(
        lp["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect::<String>(),
        c["choices"][0]["text"].as_str().unwrap()
    );
    for (chosen, top) in lp["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(lp["top_logprobs"].as_array().unwrap())
    {
        let chosen = chosen.as_f64().unwrap();
        let top: Vec<f64> = top
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(top.len() <= 2 && !top.is_empty(), "{lp}");
        let best = top.iter().copied().fold(f64::MIN, f64::max);
        assert!(
            chosen <= 0.0 && (chosen - best).abs() < 1e-4,
            "greedy picks the best: {lp}"
        );
    }

    // Completions streamed without include_usage: usage in the finish chunk.
    let body = json!({"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0, "stream": true});
    let chunks = s.stream("/v1/completions", &body).await.collect().await;
    let last = chunks.last().unwrap();
    assert_eq!(last["object"], "text_completion");
    assert!(last["choices"][0]["finish_reason"].is_string(), "{last}");
    let n = last["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=3).contains(&n), "{last}");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert!(
        c["choices"][0]["text"].as_str().unwrap().starts_with(&text),
        "{text:?} vs {c}"
    );

    // A stop string: the answer ends right before it.
    let cut = answer.find("Paris").unwrap();
    let mut body = chat(QUESTION, 12);
    body["stop"] = json!(["Paris", "never"]);
    let (_, b) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(content(&b), &answer[..cut]);
    assert_eq!(b["choices"][0]["finish_reason"], "stop");

    let metrics = s.get("/metrics").await.1;
    assert!(
        metrics.contains("# TYPE wgllm_generated_tokens_total counter"),
        "{metrics}"
    );
    assert_eq!(s.metric("wgllm_requests_total").await, 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs SmolLM2 in the model cache"]
async fn smollm2_two_clients_at_once_get_what_each_gets_alone() {
    let s = start(2, 4, 256, 1 << 20).await;
    let q1 = chat(QUESTION, 10);
    let q2 = chat("Write a haiku about the sea.", 10);
    let (_, a1) = s.post("/v1/chat/completions", &q1).await;
    let (_, a2) = s.post("/v1/chat/completions", &q2).await;
    let steps = s.metric("wgllm_steps_total").await;
    let tokens = s.metric("wgllm_generated_tokens_total").await;
    let (b1, b2) = tokio::join!(
        s.post("/v1/chat/completions", &q1),
        s.post("/v1/chat/completions", &q2)
    );
    assert_eq!((b1.0, b2.0), (200, 200));
    assert_eq!(content(&b1.1), content(&a1), "client 1");
    assert_eq!(content(&b2.1), content(&a2), "client 2");
    assert_ne!(content(&a1), content(&a2));
    // The two shared steps: fewer steps than tokens generated.
    let steps = s.metric("wgllm_steps_total").await - steps;
    let tokens = s.metric("wgllm_generated_tokens_total").await - tokens;
    assert!(
        steps < tokens,
        "{steps} steps for {tokens} tokens: no step was shared"
    );
}

/// Expects `status` and an OpenAI error object whose `param` is `param` (when given) and whose
/// message contains `says`.
async fn expect_error(
    s: &common::Server,
    path: &str,
    body: impl Into<reqwest::Body>,
    status: u16,
    param: Option<&str>,
    says: &str,
) -> Value {
    let (got, v) = s.post_raw(path, body).await;
    assert_eq!(got, status, "{v}");
    let e = &v["error"];
    assert!(e["type"].is_string(), "{v}");
    assert!(e["message"].as_str().unwrap().contains(says), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs SmolLM2 in the model cache"]
async fn smollm2_bad_input_is_a_4xx_naming_the_problem() {
    let s = start(1, 2, 256, 64 << 10).await;
    let chat_url = "/v1/chat/completions";
    let ok = chat(QUESTION, 2);
    let with = |k: &str, v: Value| {
        let mut b = ok.clone();
        b[k] = v;
        b.to_string()
    };
    expect_error(
        &s,
        chat_url,
        "{\"messages\": [",
        400,
        None,
        "not valid JSON",
    )
    .await;
    expect_error(&s, chat_url, "[1, 2]", 400, None, "must be a JSON object").await;
    // A chat request with one field wrong: refused, naming the field.
    for (key, value, says) in [
        ("temperature", json!("hot"), "must be a number"),
        ("temperature", json!(3), "between 0 and 2"),
        ("messages", json!("hi"), "must be an array"),
        (
            "messages",
            json!([{"role": "wizard", "content": "x"}]),
            "wizard",
        ),
        ("stream", json!(1), "must be a boolean"),
        ("max_tokens", json!(1.5), "must be an integer"),
        ("max_tokens", json!(0), "at least 1"),
        ("n", json!(2), "n = 1"),
        ("stop", json!(["a", "b", "c", "d", "e"]), "at most 4"),
    ] {
        expect_error(&s, chat_url, with(key, value), 400, Some(key), says).await;
    }
    let v = expect_error(
        &s,
        chat_url,
        with("max_tokens", json!(100_000)),
        400,
        Some("max_tokens"),
        "at most",
    )
    .await;
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let v = expect_error(
        &s,
        chat_url,
        with("model", json!("gpt-4o")),
        404,
        Some("model"),
        "gpt-4o",
    )
    .await;
    assert_eq!(v["error"]["code"], "model_not_found");
    // A prompt longer than a slot's context (256 tokens).
    let long = "the sea and the sky ".repeat(100);
    let v = expect_error(
        &s,
        chat_url,
        with("messages", json!([{"role": "user", "content": long}])),
        400,
        Some("messages"),
        "context",
    )
    .await;
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    expect_error(
        &s,
        "/v1/completions",
        json!({"prompt": 5}).to_string(),
        400,
        Some("prompt"),
        "must be a string",
    )
    .await;
    expect_error(
        &s,
        "/v1/completions",
        json!({"prompt": "x", "logprobs": 9}).to_string(),
        400,
        Some("logprobs"),
        "between 0 and 5",
    )
    .await;
    // A body over the limit (64 KiB here) is refused.
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(100 << 10)}]}).to_string();
    let v = expect_error(&s, chat_url, big, 413, None, "larger than the limit").await;
    assert_eq!(v["error"]["type"], "invalid_request_error");
    expect_error(&s, "/v1/nothing", "{}", 404, None, "No such route").await;

    // Still serving.
    let (status, a) = s.post(chat_url, &ok).await;
    assert_eq!(status, 200, "{a}");
    // Every refusal a route made (the oversized body is refused before any route sees it).
    assert_eq!(
        s.metric("wgllm_requests_rejected_total{reason=\"bad_request\"}")
            .await,
        16.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs SmolLM2 in the model cache"]
async fn smollm2_full_queue_is_503_with_retry_after() {
    // One slot, no waiting room.
    let mut s = start(1, 0, 256, 1 << 20).await;
    let mut body = chat("Tell me a long story about a dragon.", 200);
    body["stream"] = json!(true);
    let mut busy = s.stream("/v1/chat/completions", &body).await;
    // The role chunk, then the first content: the slot is generating.
    busy.next().await.unwrap();
    busy.next().await.unwrap();
    let r = s
        .client
        .post(format!("{}/v1/chat/completions", s.base))
        .json(&chat(QUESTION, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "server_overloaded", "{v}");
    assert_eq!(
        s.metric("wgllm_requests_rejected_total{reason=\"overloaded\"}")
            .await,
        1.0
    );
    // Shutting down ends the story at the next step, with the shutdown's error chunk.
    s.shut_down().await;
    let rest = busy.collect().await;
    let last = rest.last().unwrap();
    assert_eq!(last["error"]["code"], "server_shutting_down", "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs SmolLM2 in the model cache"]
async fn smollm2_disconnect_mid_stream_frees_the_slot() {
    // One slot and room for one waiting request.
    let s = start(1, 1, 256, 1 << 20).await;
    let mut body = chat("Tell me a long story about a dragon.", 200);
    body["stream"] = json!(true);
    let mut leaving = s.stream("/v1/chat/completions", &body).await;
    leaving.next().await.unwrap();
    leaving.next().await.unwrap();
    drop(leaving);
    // This request can only run once the slot is free: if the first were not let go, it would
    // wait for all 200 tokens.
    let (status, a) = s.post("/v1/chat/completions", &chat(QUESTION, 4)).await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(
        s.metric("wgllm_requests_finished_total{reason=\"cancelled\"}")
            .await,
        1.0
    );
    let generated = s.metric("wgllm_generated_tokens_total").await;
    assert!(generated < 100.0, "{generated} tokens: the story went on");
    assert_eq!(s.metric("wgllm_slots_busy").await, 0.0);
}

fn long(stream: bool) -> Value {
    json!({"prompt": "the sea", "max_tokens": 200, "temperature": 0, "stream": stream})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_requests_in_flight_with_503() {
    let mut s = common::serve(common::tiny_app(1, 256), common::serial().await).await;
    let mut streamed = s.stream("/v1/completions", &long(true)).await;
    let first: Value = serde_json::from_str(&streamed.next().await.unwrap()).unwrap();
    assert!(first["choices"][0]["text"].is_string(), "{first}");
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let (client, url) = (s.client.clone(), format!("{}/v1/completions", s.base));
            tokio::spawn(async move {
                let r = client.post(url).json(&long(false)).send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            })
        })
        .collect();
    // Shut down once all three are submitted: up to 600 steps of generation are still ahead.
    let t0 = std::time::Instant::now();
    while s.metric("wgllm_requests_total").await < 4.0 {
        assert!(t0.elapsed().as_secs() < 60, "the requests never arrived");
        tokio::task::yield_now().await;
    }
    s.shut_down().await;

    // The streamed request: its text so far, then the error chunk and [DONE] (or its normal
    // end, had it stopped on an end-of-generation token before the shutdown).
    let rest = streamed.collect().await;
    let last = rest.last().expect("the stream's end");
    if let Some(e) = last.get("error") {
        assert_eq!(e["code"], "server_shutting_down", "{last}");
    } else {
        assert!(last["choices"][0]["finish_reason"].is_string(), "{last}");
    }
    let mut refused = 0;
    for w in waiting {
        let (status, v) = w.await.unwrap();
        if status == 503 {
            assert_eq!(v["error"]["code"], "server_shutting_down", "{v}");
            refused += 1;
        } else {
            assert_eq!(status, 200, "{v}");
        }
    }
    assert!(
        refused >= 1,
        "every waiting request was generated to its end"
    );
    let gone = s.client.get(format!("{}/health", s.base)).send().await;
    assert!(gone.is_err(), "the port still answers: {gone:?}");
}
