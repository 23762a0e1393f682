//! Greedy and sampled decoding with a step queued ahead on the WebGPU backend
//! (`Session::queue_decode`, the token fed on the device from the previous step's argmax or
//! drawn token) produce the same tokens and cache as decoding one step at a time, for sequence 0
//! and for another sequence of a session of several, and `generate` leaves no speculative token
//! behind (nor a uniform taken from the sampler).

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_gguf::GgufFile;
use wgllm_models::generate::generate;
use wgllm_models::sampler::{Sampler, SamplerConfig};
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{NextToken, Readback, RowOut, SeqChunk, Session, SessionConfig};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const PROMPT: [u32; 5] = [1, 5, 9, 3, 77];
const STEPS: usize = 12;

fn session() -> (Session, GgufFile) {
    sequences(1)
}

/// A session of `n_seq` sequences of 32 tokens on the tiny synthetic model.
fn sequences(n_seq: usize) -> (Session, GgufFile) {
    let cfg = SessionConfig {
        n_ctx: 32,
        ubatch: 4,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    // TINY's vocabulary is byte-level (with merges), so the tokenizer loads.
    build(&LlamaShape::TINY, cfg, n_seq)
}

/// A session of `n_seq` sequences under `cfg` on a synthetic model of `shape` (Q8_0).
fn build(shape: &LlamaShape, cfg: SessionConfig, n_seq: usize) -> (Session, GgufFile) {
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let bytes = llama_gguf(shape, DType::Q8_0, 3).unwrap_or_else(|e| panic!("{e}"));
    let f = GgufFile::from_bytes(Bytes::from(bytes)).unwrap_or_else(|e| panic!("{e}"));
    (Session::with_sequences(&gpu, &f, cfg, n_seq).unwrap(), f)
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
        .queue_decode(0, NextToken::Id(first), Readback::TopK, None)
        .unwrap();
    for i in 0..STEPS {
        let ahead = (i + 1 < STEPS).then(|| {
            s.queue_decode(0, NextToken::Argmax, Readback::TopK, None)
                .unwrap()
        });
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
        .queue_decode(0, NextToken::Argmax, Readback::Argmax, None)
        .unwrap_err();
    assert!(
        err.to_string().contains("must follow a decode step"),
        "{err}"
    );
    // Resuming with the known token continues the same walk.
    let q = s
        .queue_decode(0, NextToken::Id(want[2]), Readback::Argmax, None)
        .unwrap();
    assert_eq!(s.finish_decode(q).unwrap().argmax, want[3]);
}

/// In a session of two sequences, sequence 1 decodes with steps queued ahead like batched
/// steps of it alone, leaving sequence 0's cache alone; a dropped step is truncated away.
#[test]
fn another_sequence_decodes_queued_ahead_like_batched_steps() {
    let (mut s, _f) = sequences(2);
    let other = [4, 4, 8];
    let both = |s: &mut Session| {
        let chunks = [
            SeqChunk {
                seq: 0,
                tokens: &other,
                output: false,
            },
            SeqChunk {
                seq: 1,
                tokens: &PROMPT,
                output: true,
            },
        ];
        s.step(&chunks, Readback::Argmax).unwrap()[0].argmax
    };
    fn one(tokens: &[u32]) -> [SeqChunk<'_>; 1] {
        [SeqChunk {
            seq: 1,
            tokens,
            output: true,
        }]
    }
    let mut tok = both(&mut s);
    let mut want = vec![tok];
    for _ in 0..6 {
        tok = s.step(&one(&[tok]), Readback::Argmax).unwrap()[0].argmax;
        want.push(tok);
    }
    assert!(want.windows(2).any(|w| w[0] != w[1]), "{want:?}");

    s.clear_seq(0);
    s.clear_seq(1);
    let first = both(&mut s);
    let mut got = vec![first];
    let mut q = s
        .queue_decode(1, NextToken::Id(first), Readback::Argmax, None)
        .unwrap();
    for _ in 0..6 {
        let ahead = s
            .queue_decode(1, NextToken::Argmax, Readback::Argmax, None)
            .unwrap();
        got.push(s.finish_decode(q).unwrap().argmax);
        q = ahead;
    }
    assert_eq!(got, want);
    // Another sequence's cache is not the fed step's: trimming it keeps the feed.
    assert_eq!(s.seq_len(0), other.len());
    s.truncate_seq(0, 1);
    let err = s
        .queue_decode(0, NextToken::Argmax, Readback::Argmax, None)
        .unwrap_err();
    assert!(err.to_string().contains("sequence 0"), "{err}");
    let next = s
        .queue_decode(1, NextToken::Argmax, Readback::Argmax, None)
        .unwrap();
    // The step queued ahead of `q` is dropped: its token leaves the cache.
    let last = s.finish_decode(q).unwrap().argmax;
    s.finish_decode(next).unwrap();
    assert_eq!(s.seq_len(1), PROMPT.len() + 8);
    s.truncate_seq(1, PROMPT.len() + 7);
    // Resuming with the known token gives what the steps one at a time give.
    let q = s
        .queue_decode(1, NextToken::Id(last), Readback::Argmax, None)
        .unwrap();
    let resumed = s.finish_decode(q).unwrap().argmax;
    s.truncate_seq(1, PROMPT.len() + 7);
    let row = s.step(&one(&[last]), Readback::Argmax).unwrap().remove(0);
    assert_eq!(resumed, row.argmax);
    assert_eq!(s.seq_len(1), PROMPT.len() + 8);
    assert_eq!(s.seq_len(0), 1);
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

/// A sampler hot enough that its walk wanders (the synthetic model's logits are fairly flat),
/// with every cut of llama.cpp's default chain active.
fn hot(seed: u64) -> Sampler {
    Sampler::new(SamplerConfig {
        temperature: 1.5,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        seed,
        ..SamplerConfig::default()
    })
}

/// The drawn token of a row, checked against the top-K candidates read with it.
fn drawn(row: &RowOut) -> u32 {
    let t = row.sampled.expect("the row was given a draw");
    if let Some(top) = &row.top {
        assert!(
            top.iter().take(40).any(|c| c.0 == t),
            "{t} is no top-40 candidate"
        );
    }
    t
}

/// The prompt's draw, then `STEPS` drawn tokens one blocking step at a time.
fn sampled_step_by_step(s: &mut Session, sampler: &mut Sampler) -> Vec<u32> {
    let d = [sampler.draw()];
    let mut tok = drawn(&s.step_drawn(&chunk(&PROMPT), Readback::TopK, &d).unwrap()[0]);
    let mut out = vec![tok];
    for _ in 0..STEPS {
        let d = [sampler.draw()];
        tok = drawn(&s.step_drawn(&chunk(&[tok]), Readback::TopK, &d).unwrap()[0]);
        out.push(tok);
    }
    out
}

#[test]
fn steps_fed_their_predecessors_draw_decode_like_single_steps() {
    let (mut s, _) = session();
    let greedy = step_by_step(&mut s);
    s.reset();
    let want = sampled_step_by_step(&mut s, &mut hot(7));
    assert_ne!(want, greedy, "the draws never left the argmax");
    s.reset();
    assert_ne!(
        want,
        sampled_step_by_step(&mut s, &mut hot(8)),
        "another seed, the same walk"
    );

    // Queued two deep: each step's token is its predecessor's draw, taken on the device.
    s.reset();
    let mut sampler = hot(7);
    let d = [sampler.draw()];
    let first = drawn(&s.step_drawn(&chunk(&PROMPT), Readback::Argmax, &d).unwrap()[0]);
    let mut got = vec![first];
    let mut q = s
        .queue_decode(
            0,
            NextToken::Id(first),
            Readback::Argmax,
            Some(sampler.draw()),
        )
        .unwrap();
    for i in 0..STEPS {
        let ahead = (i + 1 < STEPS).then(|| {
            s.queue_decode(0, NextToken::Sampled, Readback::TopK, Some(sampler.draw()))
                .unwrap()
        });
        got.push(drawn(&s.finish_decode(q).unwrap()));
        match ahead {
            Some(a) => q = a,
            None => break,
        }
    }
    assert_eq!(got, want);
    assert_eq!(s.n_past(), PROMPT.len() + STEPS);
}

#[test]
fn sampled_generation_leaves_only_its_tokens_and_uniforms() {
    let (mut s, f) = session();
    let want = sampled_step_by_step(&mut s, &mut hot(7));
    let tokenizer = Tokenizer::from_gguf(&f).unwrap();
    assert!(
        !want.iter().any(|&t| tokenizer.is_eog(t)),
        "pick a seed whose walk does not end: {want:?}"
    );
    for max_tokens in [1, 2, 7] {
        s.reset();
        let mut sampler = hot(7);
        let mut text = String::new();
        let stats = generate(&mut s, &tokenizer, &mut sampler, &PROMPT, max_tokens, |t| {
            text.push_str(t);
            true
        })
        .unwrap();
        assert_eq!(stats.generated_tokens, max_tokens);
        assert_eq!(text, tokenizer.decode(&want[..max_tokens]));
        // The last generated token is not evaluated; the step queued ahead was dropped.
        assert_eq!(s.n_past(), PROMPT.len() + max_tokens - 1);
        // The cache holds exactly the sampled walk, and the sampler took one uniform per token:
        // the next step continues the walk.
        let d = [sampler.draw()];
        let row = s
            .step_drawn(&chunk(&[want[max_tokens - 1]]), Readback::Argmax, &d)
            .unwrap();
        assert_eq!(drawn(&row[0]), want[max_tokens], "max_tokens {max_tokens}");
    }
    // A callback that stops at the third piece of text drops the step queued ahead, and gives
    // its uniform back.
    s.reset();
    let mut sampler = hot(7);
    let mut pieces = 0;
    let stats = generate(&mut s, &tokenizer, &mut sampler, &PROMPT, 10, |_| {
        pieces += 1;
        pieces < 3
    })
    .unwrap();
    let n = stats.generated_tokens;
    assert!(n < 10, "the callback stopped it");
    assert_eq!(s.n_past(), PROMPT.len() + n - 1);
    let d = [sampler.draw()];
    let row = s
        .step_drawn(&chunk(&[want[n - 1]]), Readback::Argmax, &d)
        .unwrap();
    assert_eq!(drawn(&row[0]), want[n]);
}

/// A session of `n_seq` sequences of `n_ctx` tokens (chunks of 64) on the tiny model, its
/// trained length raised to 1,024.
fn long_session(n_ctx: usize, n_seq: usize) -> (Session, GgufFile) {
    let shape = LlamaShape {
        n_ctx_train: 1024,
        ..LlamaShape::TINY
    };
    let cfg = SessionConfig {
        n_ctx,
        ubatch: 64,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    build(&shape, cfg, n_seq)
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| f64::from(g - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| f64::from(*w).powi(2)).sum();
    err / norm
}

/// A session of 1,024 tokens compiles its decode step over the first 256 cache rows too
/// (`SPAN_MIN`). A step over the narrow span gives the logits of a run over the whole cache;
/// decoding queued ahead across the boundary at position 256 gives the tokens of single steps,
/// the step past it taking its token from the host (`Session::can_feed`), and so does
/// `generate`.
#[test]
fn decode_steps_attend_the_narrowest_span_that_holds_the_cache() {
    assert_eq!(wgllm_models::session::SPAN_MIN, 256);
    let (mut s, f) = long_session(1024, 1);
    let prompt: Vec<u32> = (0..250u32).map(|i| (i * 37 + 11) % 300).collect();

    // Position 251 over 256 rows (a one-token run) against the two-token run over all 1,024.
    s.step(&chunk(&prompt), Readback::Argmax).unwrap();
    s.eval(&[7]).unwrap();
    let narrow = s.eval(&[9]).unwrap().remove(0);
    s.truncate(prompt.len());
    let full = s.eval(&[7, 9]).unwrap().remove(0);
    let e = nmse(&narrow, &full);
    assert!(e < 1e-6, "narrow span against the whole cache: nmse {e}");

    // Greedy single steps from the prompt through position 262.
    s.reset();
    let mut tok = s.step(&chunk(&prompt), Readback::Argmax).unwrap()[0].argmax;
    let mut want = vec![tok];
    while s.n_past() < 262 {
        tok = s.step(&chunk(&[tok]), Readback::Argmax).unwrap()[0].argmax;
        want.push(tok);
    }

    // Queued ahead: every step is fed on the device but the one that writes row 256.
    s.reset();
    let first = s.step(&chunk(&prompt), Readback::Argmax).unwrap()[0].argmax;
    let mut got = vec![first];
    let mut q = s
        .queue_decode(0, NextToken::Id(first), Readback::Argmax, None)
        .unwrap();
    let mut from_host = vec![];
    while got.len() < want.len() {
        let ahead = match s.can_feed(0) {
            true => Some(
                s.queue_decode(0, NextToken::Argmax, Readback::Argmax, None)
                    .unwrap(),
            ),
            false => None,
        };
        let row = s.finish_decode(q).unwrap();
        got.push(row.argmax);
        q = match ahead {
            Some(a) => a,
            None => {
                from_host.push(s.n_past());
                let err = s
                    .queue_decode(0, NextToken::Argmax, Readback::Argmax, None)
                    .unwrap_err();
                assert!(err.to_string().contains("same span"), "{err}");
                s.queue_decode(0, NextToken::Id(row.argmax), Readback::Argmax, None)
                    .unwrap()
            }
        };
    }
    s.finish_decode(q).unwrap();
    assert_eq!(got, want);
    assert_eq!(
        from_host,
        [256],
        "the step that writes row 256 runs the wider graph"
    );

    // generate crosses the boundary too, leaving the greedy walk in the cache.
    s.reset();
    let tokenizer = Tokenizer::from_gguf(&f).unwrap();
    let mut sampler = Sampler::new(SamplerConfig::greedy());
    let stats = generate(&mut s, &tokenizer, &mut sampler, &prompt, 12, |_| true).unwrap();
    assert_eq!(stats.generated_tokens, 12);
    assert_eq!(s.n_past(), prompt.len() + 11);
    let row = s.step(&chunk(&[want[11]]), Readback::Argmax).unwrap();
    assert_eq!(row[0].argmax, want[12]);
}

/// In a session of two sequences, sequence 1's one-token decode steps (`queue_decode`, as a
/// server's lone request runs) attend only its own rows (a window from row `n_ctx`) and give
/// the logits of a run over the whole cache, with sequence 0 holding tokens of its own.
#[test]
fn another_sequences_decode_steps_attend_only_its_rows() {
    let (mut s, _f) = long_session(512, 2);
    let tokens = |n: u32, k: u32| -> Vec<u32> { (0..n).map(|i| (i * k + 5) % 300).collect() };
    let logits = |s: &mut Session, seq: usize, tokens: &[u32]| {
        let chunk = SeqChunk {
            seq,
            tokens,
            output: true,
        };
        let row = s.step(&[chunk], Readback::Logits).unwrap().remove(0);
        row.logits.unwrap()
    };
    logits(&mut s, 0, &tokens(100, 13));
    logits(&mut s, 1, &tokens(250, 37));
    // Positions 250 and 251 in one-token steps (a window of 256 rows from row 512; a batched
    // step of one token would run padded over the whole cache), then both in a two-token run
    // over the whole cache.
    let q = s
        .queue_decode(1, NextToken::Id(7), Readback::Argmax, None)
        .unwrap();
    s.finish_decode(q).unwrap();
    let q = s
        .queue_decode(1, NextToken::Id(9), Readback::Logits, None)
        .unwrap();
    let narrow = s.finish_decode(q).unwrap().logits.unwrap();
    s.truncate_seq(1, 250);
    let full = logits(&mut s, 1, &[7, 9]);
    let e = nmse(&narrow, &full);
    assert!(
        e < 1e-6,
        "sequence 1's window against the whole cache: nmse {e}"
    );
    assert_eq!(s.seq_len(0), 100);
}
