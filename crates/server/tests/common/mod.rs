//! A real `wgllm-server` on loopback (with SmolLM2 on the WebGPU backend, lavapipe in CI, or any
//! app a test builds), and a real HTTP client (reqwest) with a small SSE reader.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use serde_json::{json, Value};
use tokio::sync::{oneshot, Mutex, MutexGuard};
use wgllm_core::{Backend, DType, Executable, Graph, TensorId};
use wgllm_cpu::CpuBackend;
use wgllm_gguf::{GgufFile, GgufWriter};
use wgllm_models::config::model_cache_dir;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{Session, SessionConfig};
use wgllm_server::{App, HttpConfig, ServerConfig};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

/// One server at a time: they share the machine's few cores.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// A running server; dropping it shuts it down.
pub struct Server {
    pub base: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _serial: MutexGuard<'static, ()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Starts a SmolLM2 server with `parallel` slots of `n_ctx` tokens and a queue of `queue`.
pub async fn start(parallel: usize, queue: usize, n_ctx: usize, max_body: usize) -> Server {
    let serial = serial().await;
    let path = model_cache_dir().join(SMOLLM2);
    let file = GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{SMOLLM2} in the model cache (wgllm pull smollm2): {e}"));
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let cfg = SessionConfig {
        n_ctx,
        ubatch: 64,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let load = Box::new(move || -> anyhow::Result<Session> {
        let backend = WebGpuBackend::new(WebGpuConfig::default())?;
        let file = GgufFile::open(&path)?;
        Ok(Session::with_sequences(&backend, &file, cfg, parallel)?)
    });
    let server = ServerConfig {
        queue,
        ubatch: 64,
        max_body_bytes: max_body,
        ..ServerConfig::new(MODEL_ID, n_ctx)
    };
    let app: Arc<App> = App::start(load, tokenizer, server).unwrap();
    serve(app, serial).await
}

/// A server of `parallel` slots of `n_ctx` tokens over the tiny synthetic llama on the CPU backend,
/// with room for 4 waiting requests.
pub fn tiny_app(parallel: usize, n_ctx: usize) -> Arc<App> {
    tiny_app_with(Faults::none(), CHATML, parallel, n_ctx)
}

/// [`tiny_app`] on a CPU backend that meets `faults`, with `template` as its chat template.
pub fn tiny_app_with(
    faults: Arc<Faults>,
    template: &str,
    parallel: usize,
    n_ctx: usize,
) -> Arc<App> {
    let bytes = with_chat_template(
        llama_gguf(&LlamaShape::TINY, DType::Q8_0, 11).unwrap(),
        template,
    );
    let tokenizer = Tokenizer::from_gguf(&GgufFile::from_bytes(bytes.clone()).unwrap()).unwrap();
    let cfg = SessionConfig {
        n_ctx,
        ubatch: 8,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let load = Box::new(move || -> anyhow::Result<Session> {
        let f = GgufFile::from_bytes(bytes)?;
        Ok(Session::with_sequences(&Faulty(faults), &f, cfg, parallel)?)
    });
    let server = ServerConfig {
        queue: 4,
        ubatch: 8,
        step_timeout: std::time::Duration::from_secs(2),
        ..ServerConfig::new("tiny", n_ctx)
    };
    App::start(load, tokenizer, server).unwrap()
}

/// What a [`Faulty`] backend does once armed.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Panics in the run.
    Panic,
    /// Blocks the run (for at most a minute), as a hung device would.
    Hang,
}

/// The faults a [`Faulty`] backend meets: every run sleeps `pace` first, and from the `at`-th
/// run on, each meets `fault`.
pub struct Faults {
    runs: AtomicUsize,
    at: AtomicUsize,
    fault: std::sync::Mutex<Option<Fault>>,
    pace_us: AtomicUsize,
}

impl Faults {
    /// A backend that never fails.
    pub fn none() -> Arc<Faults> {
        Arc::new(Faults {
            runs: AtomicUsize::new(0),
            at: AtomicUsize::new(usize::MAX),
            fault: std::sync::Mutex::new(None),
            pace_us: AtomicUsize::new(0),
        })
    }

    /// From the `k`-th run after this call on (1: the next), runs meet `fault`.
    pub fn arm(&self, k: usize, fault: Fault) {
        *self.fault.lock().unwrap() = Some(fault);
        self.at
            .store(self.runs.load(Ordering::SeqCst) + k, Ordering::SeqCst);
    }

    /// Every run from now on sleeps `d` first, as a slow device would take it.
    pub fn pace(&self, d: std::time::Duration) {
        self.pace_us.store(d.as_micros() as usize, Ordering::SeqCst);
    }

    /// Counts a run, and meets the fault when armed for it.
    fn run(&self) {
        let pace = self.pace_us.load(Ordering::SeqCst) as u64;
        std::thread::sleep(std::time::Duration::from_micros(pace));
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if n < self.at.load(Ordering::SeqCst) {
            return;
        }
        let fault = *self.fault.lock().unwrap();
        match fault {
            Some(Fault::Panic) => panic!("injected fault in graph run {n}"),
            Some(Fault::Hang) => std::thread::sleep(std::time::Duration::from_secs(60)),
            None => {}
        }
    }
}

/// The CPU backend, with [`Faults`] injected into its runs.
struct Faulty(Arc<Faults>);

impl Backend for Faulty {
    fn name(&self) -> String {
        "cpu (faults injected)".into()
    }

    fn supports(&self, graph: &Graph, t: TensorId) -> wgllm_core::Result<()> {
        CpuBackend.supports(graph, t)
    }

    fn compile(&self, graph: &Graph) -> wgllm_core::Result<Box<dyn Executable>> {
        let inner = CpuBackend.compile(graph)?;
        Ok(Box::new(FaultyRun(inner, self.0.clone())))
    }

    fn compile_shared(&self, graphs: &[&Graph]) -> wgllm_core::Result<Vec<Box<dyn Executable>>> {
        let inner = CpuBackend.compile_shared(graphs)?;
        Ok(inner
            .into_iter()
            .map(|e| Box::new(FaultyRun(e, self.0.clone())) as Box<dyn Executable>)
            .collect())
    }
}

struct FaultyRun(Box<dyn Executable>, Arc<Faults>);

impl Executable for FaultyRun {
    fn run(&mut self, inputs: &[(TensorId, &[u8])]) -> wgllm_core::Result<()> {
        self.1.run();
        self.0.run(inputs)
    }

    fn read(&mut self, t: TensorId) -> wgllm_core::Result<Vec<u8>> {
        self.0.read(t)
    }

    fn write(&mut self, t: TensorId, data: &[u8]) -> wgllm_core::Result<()> {
        self.0.write(t, data)
    }
}

/// A ChatML template that knows nothing of tools (as SmolLM2's).
pub const CHATML: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
    {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// The GGUF `file` with `template` as its chat template.
fn with_chat_template(file: Vec<u8>, template: &str) -> Bytes {
    let f = GgufFile::from_bytes(Bytes::from(file)).unwrap();
    let template = (
        "tokenizer.chat_template".into(),
        wgllm_gguf::Value::String(template.into()),
    );
    Bytes::from(GgufWriter::with_metadata(&f, [template]).unwrap().to_vec())
}

/// Serves `app` on a free loopback port; `serial` holds the machine for it.
pub async fn serve(app: Arc<App>, serial: MutexGuard<'static, ()>) -> Server {
    serve_with(app, HttpConfig::default(), serial).await
}

/// Serves `app` under `http` on a free loopback port; `serial` holds the machine for it.
pub async fn serve_with(
    app: Arc<App>,
    http: HttpConfig,
    serial: MutexGuard<'static, ()>,
) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let served = tokio::spawn(wgllm_server::serve(listener, app, http, async {
        let _ = rx.await;
    }));
    Server {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        stop: Some(tx),
        served: Some(served),
        _serial: serial,
    }
}

/// Holds the machine for one server (see [`serve`]).
pub async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

impl Server {
    /// Signals shutdown (as Ctrl-C does) and waits until `serve` returns.
    pub async fn shut_down(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
    }

    /// POSTs `body` to `path`; the status and the JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string()).await
    }

    /// POSTs raw bytes.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    /// GETs `path` as text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// A Prometheus sample's value.
    pub async fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    /// Starts a streaming request; the response, whose body is read with [`Sse`].
    pub async fn stream(&self, path: &str, body: &Value) -> Sse {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Sse {
            resp: r,
            buf: Vec::new(),
        }
    }
}

/// Server-sent events read off a response.
pub struct Sse {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Sse {
    /// The next `data:` payload, `None` at the end of the body.
    pub async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(event).unwrap();
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if !data.is_empty() {
                    return Some(data.join("\n"));
                }
                continue;
            }
            match self.resp.chunk().await.unwrap() {
                Some(c) => self.buf.extend_from_slice(&c),
                None => return None,
            }
        }
    }

    /// Every payload up to `[DONE]` (which must come, and be last), parsed.
    pub async fn collect(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(d) = self.next().await {
            if d == "[DONE]" {
                assert!(self.next().await.is_none(), "nothing after [DONE]");
                return out;
            }
            out.push(serde_json::from_str(&d).unwrap());
        }
        panic!("the stream ended without [DONE]: {out:?}");
    }
}

/// A greedy chat request.
pub fn chat(question: &str, max_tokens: usize) -> Value {
    json!({
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}
