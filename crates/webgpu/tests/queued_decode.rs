//! Greedy decoding with a step queued ahead on the WebGPU backend (`Session::queue_decode`,
//! the token fed on the device from the previous step's argmax) produces the same tokens and
//! cache as decoding one step at a time, and `generate` leaves no speculative token behind.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_gguf::GgufFile;
use wgllm_models::generate::generate;
use wgllm_models::sampler::{Sampler, SamplerConfig};
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{NextToken, Readback, SeqChunk, Session, SessionConfig};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const PROMPT: [u32; 5] = [1, 5, 9, 3, 77];
const STEPS: usize = 12;

fn session() -> (Session, GgufFile) {
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    // TINY's vocabulary is byte-level (with merges), so the tokenizer loads.
    let bytes = llama_gguf(&LlamaShape::TINY, DType::Q8_0, 3).unwrap_or_else(|e| panic!("{e}"));
    let f = GgufFile::from_bytes(Bytes::from(bytes)).unwrap_or_else(|e| panic!("{e}"));
    let cfg = SessionConfig {
        n_ctx: 32,
        ubatch: 4,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    (Session::new(&gpu, &f, cfg).unwrap(), f)
}

fn chunk(tokens: &[u32]) -> [SeqChunk<'_>; 1] {
    [SeqChunk {
        seq: 0,
        tokens,
        output: true,
    }]
}

/// The prompt's argmax, then `STEPS` greedy tokens one blocking step at a time.
fn step_by_step(s: &mut Session) -> Vec<u32> {
    let mut tok = s.step(&chunk(&PROMPT), Readback::Argmax).unwrap()[0].argmax;
    let mut out = vec![tok];
    for _ in 0..STEPS {
        tok = s.step(&chunk(&[tok]), Readback::Argmax).unwrap()[0].argmax;
        out.push(tok);
    }
    out
}

#[test]
fn steps_fed_their_predecessors_argmax_decode_like_single_steps() {
    let (mut s, _) = session();
    let want = step_by_step(&mut s);
    assert!(
        want.windows(2).any(|w| w[0] != w[1]),
        "a walk that never moves proves little: {want:?}"
    );

    // Queued two deep: each step's token is its predecessor's argmax, taken on the device.
    s.reset();
    let first = s.step(&chunk(&PROMPT), Readback::Argmax).unwrap()[0].argmax;
    let mut got = vec![first];
    let mut q = s
        .queue_decode(NextToken::Id(first), Readback::TopK)
        .unwrap();
    for i in 0..STEPS {
        let ahead =
            (i + 1 < STEPS).then(|| s.queue_decode(NextToken::Argmax, Readback::TopK).unwrap());
        let row = s.finish_decode(q).unwrap();
        // The top-K read back with it agrees with the argmax.
        assert_eq!(row.top.as_ref().unwrap()[0].0, row.argmax);
        got.push(row.argmax);
        match ahead {
            Some(a) => q = a,
            None => break,
        }
    }
    assert_eq!(got, want);
    assert_eq!(s.n_past(), PROMPT.len() + STEPS);

    // After a truncation the last argmax no longer describes the cache's last token.
    s.truncate(PROMPT.len() + 2);
    let err = s
        .queue_decode(NextToken::Argmax, Readback::Argmax)
        .unwrap_err();
    assert!(
        err.to_string().contains("must follow a decode step"),
        "{err}"
    );
    // Resuming with the known token continues the same walk.
    let q = s
        .queue_decode(NextToken::Id(want[2]), Readback::Argmax)
        .unwrap();
    assert_eq!(s.finish_decode(q).unwrap().argmax, want[3]);
}

#[test]
fn greedy_generation_leaves_only_its_tokens_in_the_cache() {
    let (mut s, f) = session();
    let want = step_by_step(&mut s);
    let tokenizer = Tokenizer::from_gguf(&f).unwrap();
    for max_tokens in [1, 2, 7] {
        s.reset();
        let mut sampler = Sampler::new(SamplerConfig::greedy());
        let stats = generate(
            &mut s,
            &tokenizer,
            &mut sampler,
            &PROMPT,
            max_tokens,
            |_| true,
        )
        .unwrap();
        assert_eq!(stats.generated_tokens, max_tokens);
        // The last generated token is not evaluated; the step queued ahead was dropped.
        assert_eq!(s.n_past(), PROMPT.len() + max_tokens - 1);
        // The cache holds exactly the greedy walk: the next step continues it.
        let last = want[max_tokens - 1];
        let row = s.step(&chunk(&[last]), Readback::Argmax).unwrap();
        assert_eq!(row[0].argmax, want[max_tokens], "max_tokens {max_tokens}");
    }
    // A callback that stops at the third piece of text drops the step queued ahead too.
    s.reset();
    let mut sampler = Sampler::new(SamplerConfig::greedy());
    let mut pieces = 0;
    let stats = generate(&mut s, &tokenizer, &mut sampler, &PROMPT, 10, |_| {
        pieces += 1;
        pieces < 3
    })
    .unwrap();
    assert_eq!(s.n_past(), PROMPT.len() + stats.generated_tokens - 1);
}
