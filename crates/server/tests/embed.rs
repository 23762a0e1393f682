//! The embedding server on loopback over a synthetic BERT on the CPU backend: OpenAI's response
//! shape (float and base64), the values the embedder gives, requests merged while the model is
//! busy, and every kind of bad input answered with a 400 naming the field.

mod loopback;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{EmbedConfig, Embedder, Session, SessionConfig, Truncate};
use wgllm_server::embed::{EmbedApp, EmbedServerConfig};
use wgllm_server::{App, ServerConfig};

fn bert() -> GgufFile {
    let shape = LlamaShape {
        n_head_kv: 4,
        n_ctx_train: 64,
        ..LlamaShape::TINY
    };
    GgufFile::from_bytes(
        model_gguf(SynthArch::Bert, &shape, DType::F32, 9)
            .unwrap()
            .into(),
    )
    .unwrap()
}

async fn start() -> (String, oneshot::Sender<()>) {
    let cfg = EmbedServerConfig {
        model_id: "tiny-bert".into(),
        queue: 16,
        max_body_bytes: 1 << 16,
        embed: EmbedConfig::default(),
    };
    let backend =
        Box::new(|| -> anyhow::Result<Box<dyn wgllm_core::Backend>> { Ok(Box::new(CpuBackend)) });
    loopback::serve(EmbedApp::start(backend, bert(), cfg).unwrap()).await
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The unit vectors the embedder itself gives.
fn expected(texts: &[&str]) -> Vec<Vec<f32>> {
    let f = bert();
    let mut e = Embedder::new(&f, EmbedConfig::default()).unwrap();
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| e.tokenize(t, Truncate::No).unwrap())
        .collect();
    e.embed_ids(&CpuBackend, &ids, true).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
}

#[tokio::test(flavor = "multi_thread")]
async fn embeddings_in_openai_format_float_and_base64() {
    let (base, _stop) = start().await;
    let texts = ["hello world", "a second input, longer than the first"];
    let want = expected(&texts);
    let (status, v) = post(
        &base,
        "/v1/embeddings",
        json!({"input": texts, "model": "tiny-bert"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "tiny-bert");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(
            (d["object"].as_str(), d["index"].as_u64()),
            (Some("embedding"), Some(i as u64))
        );
        assert!(close(&floats(&d["embedding"]), &want[i]), "input {i}");
    }
    let tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(v["usage"]["total_tokens"].as_u64(), Some(tokens));
    let tok = Tokenizer::from_gguf(&bert()).unwrap();
    let n: usize = texts
        .iter()
        .map(|t| tok.encode(t, true).unwrap().len())
        .sum();
    assert_eq!(tokens as usize, n);

    let (status, v) = post(
        &base,
        "/v1/embeddings",
        json!({"input": "hello world", "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(close(&got, &want[0]));

    // Token ids are taken as given.
    let ids = tok.encode("hello world", true).unwrap();
    let (status, v) = post(
        &base,
        "/v1/embeddings",
        json!({"input": [ids.clone(), ids]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(close(&floats(&v["data"][1]["embedding"]), &want[0]));
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_get_their_own_answers() {
    let (base, _stop) = start().await;
    let texts: Vec<String> = (0..12)
        .map(|i| format!("request number {i} says {}", "x ".repeat(i)))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let want = expected(&refs);
    let calls = texts.iter().map(|t| {
        let base = base.clone();
        let t = t.clone();
        tokio::spawn(async move { post(&base, "/v1/embeddings", json!({"input": t})).await })
    });
    for (i, c) in calls.enumerate() {
        let (status, v) = c.await.unwrap();
        assert_eq!(status, 200, "{v}");
        assert!(
            close(&floats(&v["data"][0]["embedding"]), &want[i]),
            "request {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_a_400_naming_the_field_and_the_server_keeps_serving() {
    let (base, _stop) = start().await;
    let long = "word ".repeat(80);
    let cases = [
        (json!({}), "input"),
        (json!({"input": ""}), "input"),
        (json!({"input": []}), "input"),
        (json!({"input": ["ok", ""]}), "input[1]"),
        (json!({"input": ["ok", 5]}), "input[1]"),
        (json!({"input": {"a": 1}}), "input"),
        (json!({"input": [1, 2, 999_999]}), "input"),
        (json!({"input": [[101, 102], [-1]]}), "input[1]"),
        (json!({"input": long.clone()}), "input"),
        (json!({"input": vec!["a"; 2049]}), "input"),
        (
            json!({"input": "a", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (json!({"input": "a", "dimensions": 32}), "dimensions"),
        (json!({"input": "a", "truncate": "yes"}), "truncate"),
        (json!({"input": "a", "model": 3}), "model"),
    ];
    for (body, param) in cases {
        let (status, v) = post(&base, "/v1/embeddings", body.clone()).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    let (status, v) = post(
        &base,
        "/v1/embeddings",
        json!({"input": "a", "model": "other"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("model_not_found")),
        "{v}"
    );
    let (status, v) = post(&base, "/v1/chat/completions", json!({"messages": []})).await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("embedding model"),
        "{v}"
    );
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // Not declared JSON: refused before it is parsed.
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .body(r#"{"input": "a"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    // Truncated on request; still serving.
    let (status, v) = post(
        &base,
        "/v1/embeddings",
        json!({"input": long, "truncate": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 64);
    let m = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(m.contains("wgllm_embed_requests_rejected_total 16"), "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_model_refuses_embeddings() {
    let bytes = model_gguf(SynthArch::Llama, &LlamaShape::TINY, DType::F32, 1).unwrap();
    let file = GgufFile::from_bytes(bytes.into()).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let cfg = SessionConfig {
        n_ctx: 64,
        ..SessionConfig::default()
    };
    let load = Box::new(move || -> anyhow::Result<Session> {
        Ok(Session::with_sequences(&CpuBackend, &file, cfg, 1)?)
    });
    let app = App::start(load, tokenizer, ServerConfig::new("tiny-llama", 64)).unwrap();
    let (base, _stop) = loopback::serve(app).await;
    let (status, v) = post(&base, "/v1/embeddings", json!({"input": "hi"})).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("model_not_supported")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("embedding model"),
        "{v}"
    );
}
