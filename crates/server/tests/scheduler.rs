//! The scheduler, on a tiny synthetic llama on the CPU backend and on the WebGPU backend
//! (lavapipe in CI).
//! - Lone-client decoding with a step queued ahead on the device: what each request gets (text,
//!   finish, usage) and the step counters must be exactly what the same engine with
//!   `queue_ahead` off gives, when a request runs alone, ends on a stop string, an
//!   end-of-generation token or `max_tokens` with the next request on the same slot, or shares
//!   the engine with a request arriving mid-stream.
//! - The prompt cache: a request repeating a finished one's prompt, or continuing its
//!   conversation (its prompt and generated tokens, then more), runs only what its slot does
//!   not hold, as many tokens as counted here from the greedy tokens computed apart, and gets
//!   what an engine without the cache gives; with two slots each prompt finds its own, and a
//!   prompt sharing only a little with a long conversation leaves it whole.
//! - Dropping the engine (the server shutting down) ends the requests it holds instead of
//!   generating them to the end.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::sampler::SamplerConfig;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{Session, SessionConfig};
use wgllm_server::api::GenParams;
use wgllm_server::error::ApiError;
use wgllm_server::metrics::Metrics;
use wgllm_server::scheduler::{Engine, EngineOptions, Event, Finish, Job, Usage};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const A: &[u32] = &[1, 57, 9, 3, 207, 12, 40];
const B: &[u32] = &[7, 7, 160, 2];

fn model() -> (Bytes, Arc<Tokenizer>) {
    let bytes = Bytes::from(llama_gguf(&LlamaShape::TINY, DType::Q8_0, 11).unwrap());
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    (bytes, Arc::new(Tokenizer::from_gguf(&f).unwrap()))
}

#[derive(Clone, Copy)]
enum Backend {
    Cpu,
    Gpu,
}

/// Sequences of 64 tokens, steps of 8, an f16 cache.
fn session_config() -> SessionConfig {
    SessionConfig {
        n_ctx: 64,
        ubatch: 8,
        kv_dtype: DType::F16,
        all_logits: false,
    }
}

/// An engine of `slots` slots of 64 tokens over the tiny model, without the prompt cache.
fn engine(backend: Backend, slots: usize, queue_ahead: bool) -> Engine {
    engine_with(backend, slots, queue_ahead, false)
}

fn engine_with(backend: Backend, slots: usize, queue_ahead: bool, prompt_cache: bool) -> Engine {
    let (bytes, tok) = model();
    let load = Box::new(move || -> anyhow::Result<Session> {
        let f = GgufFile::from_bytes(bytes)?;
        let cfg = session_config();
        Ok(match backend {
            Backend::Cpu => Session::with_sequences(&CpuBackend, &f, cfg, slots)?,
            Backend::Gpu => {
                let gpu = WebGpuBackend::new(WebGpuConfig::default())?;
                Session::with_sequences(&gpu, &f, cfg, slots)?
            }
        })
    });
    let opts = EngineOptions {
        queue: 4,
        ubatch: 8,
        queue_ahead,
        prompt_cache,
        step_timeout: std::time::Duration::from_secs(120),
    };
    Engine::start(load, tok, opts, Arc::new(Metrics::default())).unwrap()
}

fn greedy(max_tokens: usize, stop: &[&str]) -> GenParams {
    GenParams {
        max_tokens,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        stop: stop.iter().map(|s| s.to_string()).collect(),
        stream: true,
        include_usage: false,
        logprobs: None,
    }
}

fn submit(e: &Engine, prompt: &[u32], params: GenParams) -> UnboundedReceiver<Event> {
    let (tx, rx) = unbounded_channel();
    e.submit(Job {
        prompt: prompt.to_vec(),
        params,
        events: tx,
        constraint: None,
    })
    .unwrap();
    rx
}

/// What a request got: its text, how it ended, its counts.
type Got = (String, Finish, Usage);

fn collect(mut rx: UnboundedReceiver<Event>) -> Got {
    let mut text = String::new();
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done { finish, usage } => return (text, finish, usage),
            Event::Failed(e) => panic!("the request failed: {}", e.message),
        }
    }
    panic!("the scheduler closed the stream without an end")
}

fn run(e: &Engine, prompt: &[u32], params: GenParams) -> Got {
    collect(submit(e, prompt, params))
}

/// Two tests of `body(backend)`: `cpu` on the CPU backend, `gpu` on WebGPU.
macro_rules! on_both_backends {
    ($(#[$doc:meta])* $cpu:ident, $gpu:ident, $body:ident) => {
        $(#[$doc])*
        #[test]
        fn $cpu() {
            $body(Backend::Cpu);
        }

        $(#[$doc])*
        #[test]
        fn $gpu() {
            $body(Backend::Gpu);
        }
    };
}

/// (steps, generated tokens, steps queued ahead) so far.
fn counts(e: &Engine) -> (u64, u64, u64) {
    let m = e.metrics();
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    (g(&m.steps), g(&m.generated_tokens), g(&m.steps_ahead))
}

/// A lone greedy request, and a lone top-K sampled one (drawn on the device when queued
/// ahead), get exactly what the synchronous path gives, in as many counted steps.
#[test]
fn lone_requests_get_what_the_synchronous_path_gives() {
    let (sync, ahead) = (
        engine(Backend::Cpu, 2, false),
        engine(Backend::Cpu, 2, true),
    );
    let sampled = GenParams {
        sampler: SamplerConfig {
            temperature: 1.2,
            seed: 5,
            ..SamplerConfig::default()
        },
        ..greedy(16, &[])
    };
    for (prompt, params) in [(A, greedy(20, &[])), (B, greedy(12, &[])), (A, sampled)] {
        let want = run(&sync, prompt, params.clone());
        assert!(want.2.completion_tokens >= 4, "{want:?} ends too early");
        assert_eq!(run(&ahead, prompt, params), want);
    }
    let (s, a) = (counts(&sync), counts(&ahead));
    assert_eq!((a.0, a.1), (s.0, s.1), "steps and tokens counted");
    assert_eq!(s.2, 0);
    assert!(a.2 > 0, "no step was queued ahead");
}

on_both_backends!(
    /// A request ending on a stop string (with a step queued ahead) or at `max_tokens` leaves its
    /// slot, the only one, ready for the next: each request gets what it gets on the synchronous
    /// engine, in the same order.
    ends_leave_the_slot_ready_for_the_next_request,
    ends_leave_the_slot_ready_for_the_next_request_on_webgpu,
    ends_leave_the_slot_ready
);

fn ends_leave_the_slot_ready(backend: Backend) {
    let (sync, ahead) = (engine(backend, 1, false), engine(backend, 1, true));
    let full = run(&sync, A, greedy(20, &[])).0;
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 8, "{full:?} is too short to stop in");
    // Two characters first seen past two thirds of the text: the stop comes late.
    let stop: String = (chars.len() * 2 / 3..chars.len() - 1)
        .map(|k| chars[k..k + 2].iter().collect::<String>())
        .find(|s| full.find(s.as_str()) > full.char_indices().nth(chars.len() / 2).map(|c| c.0))
        .expect("a late stop string");
    let requests = [
        (A, greedy(20, &[&stop])),
        (A, greedy(20, &[])),
        (B, greedy(3, &[])),
        (A, greedy(20, &[&stop])),
        (B, greedy(12, &[])),
    ];
    for (n, (prompt, params)) in requests.into_iter().enumerate() {
        let want = run(&sync, prompt, params.clone());
        assert_eq!(run(&ahead, prompt, params), want, "request {n}");
        if n == 0 {
            assert_eq!(want.1, Finish::Stop);
            assert!(
                (8..19).contains(&want.2.completion_tokens),
                "{want:?} did not stop late or did not stop early"
            );
        }
    }
    assert!(counts(&ahead).2 > 0, "no step was queued ahead");
}

on_both_backends!(
    /// A second request arriving while the first decodes with a step queued ahead: both get what
    /// each gets alone, the second decoding alone in the second slot once the first has ended.
    a_request_arriving_mid_stream_gets_its_own_output,
    a_request_arriving_mid_stream_gets_its_own_output_on_webgpu,
    arriving_mid_stream
);

fn arriving_mid_stream(backend: Backend) {
    let sync = engine(backend, 2, false);
    let want_a = run(&sync, A, greedy(12, &[]));
    let want_b = run(&sync, B, greedy(24, &[]));
    // B ends on an end-of-generation token, with a step queued ahead.
    assert_eq!(want_b.1, Finish::Stop);
    assert!(
        want_b.2.completion_tokens >= 16,
        "{want_b:?} ends too early"
    );
    let ahead = engine(backend, 2, true);
    let mut rx_a = submit(&ahead, A, greedy(12, &[]));
    let mut early = String::new();
    // The first token comes from the prompt's step; wait for one decoded ahead.
    while counts(&ahead).2 < 1 {
        match rx_a.blocking_recv() {
            Some(Event::Text { text, .. }) => early.push_str(&text),
            other => panic!("request A ended early: {other:?}"),
        }
    }
    let rx_b = submit(&ahead, B, greedy(24, &[]));
    let mut got_a = collect(rx_a);
    got_a.0.insert_str(0, &early);
    assert_eq!(got_a, want_a, "request A");
    let alone = counts(&ahead).2;
    assert_eq!(collect(rx_b), want_b, "request B");
    let (steps, tokens, ahead_steps) = counts(&ahead);
    assert!(
        ahead_steps > alone + 4,
        "request B did not decode ahead in slot 1 once alone"
    );
    assert!(steps < tokens, "the requests shared no step");
}

/// Dropping the engine stops its scheduler after the step in flight: of four long requests on
/// one slot, the last, still waiting, gets nothing but the 503 of a shutdown, where finishing
/// the requests first would have generated 200 tokens before the drop returned.
#[test]
fn dropping_the_engine_ends_its_requests() {
    let e = engine(Backend::Cpu, 1, true);
    let mut rx: Vec<_> = (0..4).map(|_| submit(&e, A, greedy(50, &[]))).collect();
    drop(e);
    let mut last = rx.pop().unwrap();
    assert_eq!(
        last.blocking_recv(),
        Some(Event::Failed(ApiError::shutting_down())),
        "a waiting request was served"
    );
    assert_eq!(last.blocking_recv(), None);
    for mut r in rx {
        // Whatever came before the drop, the channel ends.
        while r.blocking_recv().is_some() {}
    }
}

/// The greedy tokens after `prompt` (at most `n`, ending before an end-of-generation token),
/// computed apart from the scheduler with a session of its own.
fn greedy_ids(prompt: &[u32], n: usize) -> Vec<u32> {
    let (bytes, tok) = model();
    let f = GgufFile::from_bytes(bytes).unwrap();
    let mut session = Session::new(&CpuBackend, &f, session_config()).unwrap();
    let mut ids = Vec::new();
    let mut logits = session.eval(prompt).unwrap().pop().unwrap();
    while ids.len() < n {
        let id = (0..logits.len() as u32)
            .max_by(|&a, &b| {
                logits[a as usize]
                    .total_cmp(&logits[b as usize])
                    .then(b.cmp(&a))
            })
            .unwrap();
        if tok.is_eog(id) {
            break;
        }
        ids.push(id);
        logits = session.eval(&[id]).unwrap().pop().unwrap();
    }
    ids
}

on_both_backends!(
    the_prompt_cache_runs_only_what_a_slot_does_not_hold,
    the_prompt_cache_runs_only_what_a_slot_does_not_hold_on_webgpu,
    prompt_cache
);

fn prompt_cache(backend: Backend) {
    let (plain, cached) = (
        engine(backend, 1, true),
        engine_with(backend, 1, true, true),
    );
    let both = |prompt: &[u32], params: GenParams| {
        let want = run(&plain, prompt, params.clone());
        let got = run(&cached, prompt, params);
        assert_eq!((&got.0, got.1), (&want.0, want.1), "{prompt:?}");
        assert_eq!(got.2.completion_tokens, want.2.completion_tokens);
        assert_eq!(want.2.cached_tokens, 0, "the plain engine kept tokens");
        got.2.cached_tokens
    };
    // Nothing is kept at first; the same prompt again reuses all but its last token.
    assert_eq!(both(A, greedy(12, &[])), 0);
    assert_eq!(both(A, greedy(12, &[])), A.len() - 1);
    // A conversation's next turn: the prompt, the reply, then more. The slot holds the prompt
    // and every generated token a step has fed: all but the last at `max_tokens`.
    let reply = greedy_ids(A, 12);
    let (n, last_fed) = match reply.len() {
        12 => (12, 11),
        n => (n, n),
    };
    let turn: Vec<u32> = [A, &reply[..n], B].concat();
    assert_eq!(both(&turn, greedy(8, &[])), A.len() + last_fed);
    // A prompt sharing only a prefix: the cache is cut there.
    let other: Vec<u32> = [&A[..3], B].concat();
    assert_eq!(both(&other, greedy(8, &[])), 3);
}

/// Two slots: each prompt goes back to the slot holding it, and a prompt sharing nothing takes
/// the slot holding fewer tokens, so the other's stay.
#[test]
fn each_prompt_finds_the_slot_that_holds_it() {
    let e = engine_with(Backend::Cpu, 2, false, true);
    let cached = |prompt: &[u32]| run(&e, prompt, greedy(4, &[])).2.cached_tokens;
    assert_eq!(cached(A), 0);
    assert_eq!(cached(B), 0);
    assert_eq!(cached(A), A.len() - 1);
    assert_eq!(cached(B), B.len() - 1);
    // A's slot holds 7 + 3 tokens, B's 4 + 3: [9, 9, 9] takes B's, and A's stays.
    assert_eq!(cached(&[9, 9, 9]), 0);
    assert_eq!(cached(A), A.len() - 1);
    assert_eq!(cached(B), 0);
}

/// A prompt sharing only a short prefix with a slot's long conversation takes the other slot
/// (least recently used) rather than throw that conversation away, which then comes back whole.
#[test]
fn a_new_prompt_does_not_cut_a_longer_conversation_short() {
    let e = engine_with(Backend::Cpu, 2, false, true);
    let long: Vec<u32> = (0..20).map(|k| 30 + 7 * k).collect();
    let cached = |prompt: &[u32]| run(&e, prompt, greedy(8, &[])).2.cached_tokens;
    assert_eq!(cached(&long), 0);
    let short: Vec<u32> = [&long[..3], B].concat();
    assert_eq!(
        cached(&short),
        0,
        "the short prompt took the long one's slot"
    );
    assert_eq!(cached(&long), long.len() - 1);
}
