//! The server under abuse, over the tiny synthetic llama on the CPU backend: the API key; pages
//! of foreign origins, foreign Host names and bodies not declared JSON refused; slowloris
//! connections (headers or bodies dribbled) closed on time while a normal request is served; the
//! connection cap; the request timeout; a waiting request whose client left giving its place
//! back; a backend that panics or hangs on a step failing every request within seconds and
//! turning `/health` 503; a chat template that loops without end failing fast while `/health`
//! answers.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wgllm_server::HttpConfig;

use crate::common::{self, Fault, Faults, CHATML};

fn hello(max_tokens: usize) -> Value {
    json!({
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// POSTs `body` with extra `headers`; the status, the headers and the JSON answer.
async fn post(
    s: &common::Server,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut r = s.client.post(format!("{}{path}", s.base)).body(body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let (status, h) = (r.status().as_u16(), r.headers().clone());
    (status, h, r.json().await.unwrap_or(Value::Null))
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn the_api_key_is_asked_everywhere_but_health() {
    let http = HttpConfig {
        api_key: Some("sekrit-key".into()),
        ..HttpConfig::default()
    };
    let s = common::serve_with(common::tiny_app(1, 256), http, common::serial().await).await;
    let body = hello(2).to_string();
    for auth in [None, Some("Bearer wrong-key!"), Some("sekrit-key")] {
        let mut h = vec![JSON];
        h.extend(auth.map(|a| ("authorization", a)));
        let (status, headers, v) = post(&s, "/v1/chat/completions", &h, body.clone()).await;
        assert_eq!(status, 401, "{auth:?}: {v}");
        assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
        assert_eq!(headers["www-authenticate"], "Bearer");
    }
    let (status, _, v) = post(
        &s,
        "/v1/chat/completions",
        &[JSON, ("authorization", "Bearer sekrit-key")],
        body,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.get("/health").await.0, 200);
    assert_eq!(s.get("/v1/models").await.0, 401);
    // The refusals are counted: three posts and the models list.
    let (status, metrics) = s.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("wgllm_requests_total 1"), "{metrics}");
    assert!(
        metrics.contains("wgllm_http_refused_total{reason=\"unauthorized\",status=\"401\"} 4"),
        "{metrics}"
    );
    drop(s);

    let http = HttpConfig {
        api_key: Some("sekrit-key".into()),
        api_key_health: true,
        ..HttpConfig::default()
    };
    let s = common::serve_with(common::tiny_app(1, 256), http, common::serial().await).await;
    assert_eq!(s.get("/health").await.0, 401);
    assert_eq!(s.get("/metrics").await.0, 401);
}

#[tokio::test]
async fn foreign_pages_hosts_and_undeclared_bodies_are_refused() {
    let http = HttpConfig {
        cors: vec!["https://app.example".into()],
        ..HttpConfig::default()
    };
    let s = common::serve_with(common::tiny_app(1, 256), http, common::serial().await).await;
    let body = hello(2).to_string();
    let chat = "/v1/chat/completions";
    // A page's "simple" request: text/plain, with its origin.
    let (status, _, v) = post(
        &s,
        chat,
        &[
            ("content-type", "text/plain"),
            ("origin", "http://evil.example"),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "forbidden_origin", "{v}");
    // JSON from that page is refused too; so is a file:// page.
    for origin in ["http://evil.example", "null"] {
        let (status, _, v) = post(&s, chat, &[JSON, ("origin", origin)], body.clone()).await;
        assert_eq!(status, 403, "{origin}: {v}");
    }
    // Not declared JSON, from no page at all: 415 naming what to send.
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let h: Vec<_> = ct.map(|c| ("content-type", c)).into_iter().collect();
        let (status, _, v) = post(&s, chat, &h, body.clone()).await;
        assert_eq!(status, 415, "{ct:?}: {v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("application/json"), "{m}");
    }
    // A DNS-rebinding page reaches the loopback through its own name.
    let (status, _, v) = post(
        &s,
        chat,
        &[JSON, ("host", "evil.example:8080")],
        body.clone(),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "forbidden_host", "{v}");
    // The allowed origin: its preflight is answered, and so is its request, with CORS headers.
    let r = s
        .client
        .request(reqwest::Method::OPTIONS, format!("{}{chat}", s.base))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let methods = r.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let (status, h, v) = post(&s, chat, &[JSON, ("origin", "https://app.example")], body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(h["access-control-allow-origin"], "https://app.example");
}

/// Whether the server closes `c` within `within` (reads end or fail), draining what it sends.
async fn closed_within(c: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let until = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until.into(), c.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn slowloris_is_cut_off_on_time_while_others_are_served() {
    let http = HttpConfig {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..HttpConfig::default()
    };
    let s = common::serve_with(common::tiny_app(1, 256), http, common::serial().await).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    let t0 = Instant::now();
    // Headers dribbled a line at a time, never ending.
    let mut headers = Vec::new();
    for _ in 0..48 {
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n")
            .await
            .unwrap();
        headers.push(c);
    }
    let dribble = {
        let mut conns = std::mem::take(&mut headers);
        tokio::spawn(async move {
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                for c in conns.iter_mut() {
                    // The server closing it is what the test waits for.
                    let _ = c.write_all(b"x-pad: a\r\n").await;
                }
            }
            conns
        })
    };
    // A body dribbled a byte at a time: 408.
    let mut body = TcpStream::connect(&addr).await.unwrap();
    body.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{",
    )
    .await
    .unwrap();
    // A normal request meanwhile.
    let (status, _, v) = post(&s, "/v1/chat/completions", &[JSON], hello(4).to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "the request waited on the slow ones"
    );
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(4), body.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the dribbled body was not cut off");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let mut conns = dribble.await.unwrap();
    for (i, c) in conns.iter_mut().enumerate() {
        assert!(
            closed_within(c, Duration::from_millis(500)).await,
            "dribbling connection {i} still open after {:?}",
            t0.elapsed()
        );
    }
    // An idle keep-alive connection closes after the header timeout too.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(3)).await);
    assert_eq!(s.get("/health").await.0, 200);
}

#[tokio::test]
async fn connections_past_the_cap_are_told_503() {
    let http = HttpConfig {
        max_connections: 3,
        ..HttpConfig::default()
    };
    let s = common::serve_with(common::tiny_app(1, 256), http, common::serial().await).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Accepted in order: the held ones take the cap before the next is accepted.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = TcpStream::connect(&addr).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), extra.read_to_end(&mut answer))
        .await
        .expect("the connection past the cap was not closed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many open connections"), "{answer}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.get("/health").await.0, 200);
}

#[tokio::test]
async fn requests_end_at_the_request_timeout() {
    let faults = Faults::none();
    let app = common::tiny_app_with(faults.clone(), CHATML, 1, 256);
    let http = HttpConfig {
        request_timeout: Duration::from_secs(1),
        ..HttpConfig::default()
    };
    let s = common::serve_with(app, http, common::serial().await).await;
    faults.pace(Duration::from_millis(100));
    let t0 = Instant::now();
    let (status, _, v) = post(&s, "/v1/chat/completions", &[JSON], hello(100).to_string()).await;
    assert_eq!(status, 504, "{v}");
    assert_eq!(v["error"]["code"], "timeout", "{v}");
    let mut streamed = hello(100);
    streamed["stream"] = json!(true);
    let chunks = s
        .stream("/v1/chat/completions", &streamed)
        .await
        .collect()
        .await;
    let last = chunks.last().unwrap();
    assert_eq!(last["error"]["code"], "timeout", "{last}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn a_waiting_request_whose_client_left_gives_its_place_back() {
    let faults = Faults::none();
    let app = common::tiny_app_with(faults.clone(), CHATML, 1, 512);
    let s = common::serve_with(app, HttpConfig::default(), common::serial().await).await;
    faults.pace(Duration::from_millis(50));
    let mut long = hello(200);
    long["stream"] = json!(true);
    let mut busy = s.stream("/v1/chat/completions", &long).await;
    busy.next().await.unwrap();
    // The queue holds 4: four clients wait, then leave.
    let mut left = Vec::new();
    for _ in 0..4 {
        let (client, url) = (s.client.clone(), format!("{}/v1/chat/completions", s.base));
        left.push(tokio::spawn(async move {
            client.post(url).json(&hello(2)).send().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.metric("wgllm_queue_depth").await, 4.0);
    for t in &left {
        t.abort();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Their places are free: four more are queued, not refused.
    let mut waiting = Vec::new();
    for _ in 0..4 {
        let (client, url) = (s.client.clone(), format!("{}/v1/chat/completions", s.base));
        waiting.push(tokio::spawn(async move {
            client
                .post(url)
                .json(&hello(2))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(busy);
    for w in waiting {
        assert_eq!(w.await.unwrap(), 200);
    }
}

/// Starts three requests (one streamed) on a server whose backend then meets `fault`; each must
/// fail with a 500 within `within`, `/health` must say 503 naming `why`, and a new request must
/// be refused at once.
async fn every_request_fails(fault: Fault, why: &str, within: Duration) {
    let faults = Faults::none();
    let app = common::tiny_app_with(faults.clone(), CHATML, 2, 256);
    let s = common::serve_with(app, HttpConfig::default(), common::serial().await).await;
    // Healthy first.
    let (status, _, v) = post(&s, "/v1/chat/completions", &[JSON], hello(2).to_string()).await;
    assert_eq!(status, 200, "{v}");
    faults.pace(Duration::from_millis(20));
    let mut streamed = hello(100);
    streamed["stream"] = json!(true);
    let mut stream = s.stream("/v1/chat/completions", &streamed).await;
    let mut plain = Vec::new();
    for _ in 0..2 {
        let (client, url) = (s.client.clone(), format!("{}/v1/chat/completions", s.base));
        plain.push(tokio::spawn(async move {
            let r = client.post(url).json(&hello(100)).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }));
    }
    // Two generating, one waiting.
    stream.next().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    faults.arm(1, fault);
    let chunks = stream.collect().await;
    let last = chunks.last().unwrap();
    assert!(
        last["error"]["message"].as_str().unwrap().contains(why),
        "{last}"
    );
    for p in plain {
        let (status, v) = p.await.unwrap();
        assert_eq!(status, 500, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(why), "{v}");
    }
    assert!(
        t0.elapsed() < within,
        "the requests took {:?} to fail",
        t0.elapsed()
    );
    let (status, health) = s.get("/health").await;
    assert_eq!(status, 503, "{health}");
    assert!(health.contains(why), "{health}");
    let t1 = Instant::now();
    let (status, _, v) = post(&s, "/v1/chat/completions", &[JSON], hello(2).to_string()).await;
    assert_eq!(status, 500, "{v}");
    assert!(t1.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_backend_panicking_on_a_step_fails_every_request() {
    every_request_fails(Fault::Panic, "injected fault", Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_hung_step_fails_every_request_at_the_step_timeout() {
    // The tiny app's step timeout is 2 s.
    every_request_fails(Fault::Hang, "device is hung", Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_template_looping_without_end_fails_fast_while_health_answers() {
    let hostile =
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}";
    let app = common::tiny_app_with(Faults::none(), hostile, 1, 256);
    let s = common::serve_with(app, HttpConfig::default(), common::serial().await).await;
    let t0 = Instant::now();
    let chats: Vec<_> = (0..4)
        .map(|_| {
            let (client, url) = (s.client.clone(), format!("{}/v1/chat/completions", s.base));
            tokio::spawn(async move {
                let r = client.post(url).json(&hello(2)).send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t1 = Instant::now();
    assert_eq!(s.get("/health").await.0, 200);
    assert!(
        t1.elapsed() < Duration::from_millis(500),
        "/health took {:?}",
        t1.elapsed()
    );
    for c in chats {
        let (status, v) = c.await.unwrap();
        assert_eq!(status, 400, "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("template"), "{m}");
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // Completions need no template.
    let b = json!({"prompt": "a b", "max_tokens": 2, "temperature": 0});
    let (status, _, v) = post(&s, "/v1/completions", &[JSON], b.to_string()).await;
    assert_eq!(status, 200, "{v}");
}
