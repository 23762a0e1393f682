//! Shutting a server down (what Ctrl-C does to `wgllm serve`) with requests in flight, on a tiny
//! synthetic llama on the CPU backend: the streamed request in the one slot and the requests
//! waiting behind it end at once with the 503 `server_shutting_down` (an error chunk, then
//! `[DONE]`, when streamed), `serve` returns, and the port takes no new connection. Before, the
//! shutdown waited for every request to generate to its `max_tokens`.

// `common` also serves the SmolLM2 tests, whose helpers this file does not use.
#[allow(dead_code)]
mod common;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{Session, SessionConfig};
use wgllm_server::{App, ServerConfig};

/// A server of one slot of 256 tokens over the tiny model, with room for 4 waiting requests.
fn tiny_app() -> Arc<App> {
    let bytes = Bytes::from(llama_gguf(&LlamaShape::TINY, DType::Q8_0, 11).unwrap());
    let tokenizer = Tokenizer::from_gguf(&GgufFile::from_bytes(bytes.clone()).unwrap()).unwrap();
    let cfg = SessionConfig {
        n_ctx: 256,
        ubatch: 8,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let load = Box::new(move || -> anyhow::Result<Session> {
        let f = GgufFile::from_bytes(bytes)?;
        Ok(Session::with_sequences(&CpuBackend, &f, cfg, 1)?)
    });
    let server = ServerConfig {
        queue: 4,
        ubatch: 8,
        ..ServerConfig::new("tiny", 256)
    };
    App::start(load, tokenizer, server).unwrap()
}

fn long(stream: bool) -> Value {
    json!({"prompt": "the sea", "max_tokens": 200, "temperature": 0, "stream": stream})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_requests_in_flight_with_503() {
    let mut s = common::serve(tiny_app(), common::serial().await).await;
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
