//! Several sequences in one `Session` on the CPU backend (the unified KV cache): sequences fed in
//! the same runs give the logits each gives alone, padded runs included, for llama and for Gemma 3
//! across its sliding window; the output head's argmax and top-K agree with the logits; the
//! sampler draws the same from the top-K candidates as from the whole row; misuse is an error.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::sampler::{argmax, Sampler, SamplerConfig};
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::{ModelError, Readback, RowOut, SeqChunk, Session, SessionConfig};

fn model(arch: SynthArch) -> GgufFile {
    let shape = LlamaShape {
        n_vocab: 96,
        tied_output: matches!(arch, SynthArch::Gemma3 { .. }),
        ..LlamaShape::TINY
    };
    let bytes = model_gguf(arch, &shape, DType::Q8_0, 3).unwrap();
    GgufFile::from_bytes(Bytes::from(bytes)).unwrap()
}

const CFG: SessionConfig = SessionConfig {
    n_ctx: 24,
    ubatch: 8,
    kv_dtype: DType::F32,
    all_logits: false,
};

const PROMPTS: [&[u32]; 3] = [
    &[1, 5, 9, 3, 77, 12, 40, 2, 95, 0, 33],
    &[7, 7, 60, 2],
    &[90, 14, 3, 3, 51, 8, 8],
];

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Greedy continuation of `prompt` for `n` tokens in a one-sequence session: the logits of every
/// step.
fn alone(f: &GgufFile, prompt: &[u32], n: usize) -> Vec<Vec<f32>> {
    let mut s = Session::new(&CpuBackend, f, CFG).unwrap();
    let mut rows = s.eval(prompt).unwrap();
    for _ in 1..n {
        let next = argmax(rows.last().unwrap());
        rows.extend(s.eval(&[next]).unwrap());
    }
    rows
}

/// The same continuations with every sequence in one session: all prompts in one step, then
/// one decode step for all of them at a time.
fn together(f: &GgufFile, n_seq: usize, n: usize) -> Vec<Vec<Vec<f32>>> {
    let mut s = Session::with_sequences(&CpuBackend, f, CFG, n_seq).unwrap();
    let chunks: Vec<SeqChunk> = (0..n_seq)
        .map(|i| SeqChunk {
            seq: i,
            tokens: PROMPTS[i],
            output: true,
        })
        .collect();
    let mut rows: Vec<RowOut> = s.step(&chunks, Readback::Logits).unwrap();
    let mut all: Vec<Vec<Vec<f32>>> = rows
        .iter()
        .map(|r| vec![r.logits.clone().unwrap()])
        .collect();
    for _ in 1..n {
        let next: Vec<[u32; 1]> = rows.iter().map(|r| [r.argmax]).collect();
        let chunks: Vec<SeqChunk> = (0..n_seq)
            .map(|i| SeqChunk {
                seq: i,
                tokens: &next[i],
                output: true,
            })
            .collect();
        rows = s.step(&chunks, Readback::Logits).unwrap();
        for (i, r) in rows.iter().enumerate() {
            all[i].push(r.logits.clone().unwrap());
        }
    }
    for (i, p) in PROMPTS[..n_seq].iter().enumerate() {
        assert_eq!(s.seq_len(i), p.len() + n - 1);
    }
    all
}

fn check_batched(arch: SynthArch) {
    let f = model(arch);
    let n = 9;
    let want: Vec<_> = PROMPTS.iter().map(|p| alone(&f, p, n)).collect();
    // Two sequences: runs of exactly one token each; three: decode runs padded from 3 to 4.
    for n_seq in [2, 3] {
        let got = together(&f, n_seq, n);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            for (step, (a, b)) in g.iter().zip(w).enumerate() {
                let d = max_abs_diff(a, b);
                assert!(
                    d < 1e-4,
                    "{arch:?}, {n_seq} sequences: seq {i} step {step} differs by {d}"
                );
            }
        }
    }
}

#[test]
fn sequences_batched_together_match_each_alone() {
    check_batched(SynthArch::Llama);
}

#[test]
fn gemma3_sequences_batched_past_the_window_match_each_alone() {
    // A window of 4 is passed by every prompt and continuation.
    check_batched(SynthArch::Gemma3 {
        head_dim: 32,
        window: 4,
    });
}

#[test]
fn output_head_agrees_with_the_logits() {
    let f = model(SynthArch::Llama);
    let mut s = Session::with_sequences(&CpuBackend, &f, CFG, 2).unwrap();
    assert_eq!(s.candidates(), 64);
    let chunks = [
        SeqChunk {
            seq: 1,
            tokens: PROMPTS[0],
            output: true,
        },
        SeqChunk {
            seq: 0,
            tokens: PROMPTS[1],
            output: true,
        },
    ];
    let rows = s.step(&chunks, Readback::Logits).unwrap();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        let logits = r.logits.as_ref().unwrap();
        assert_eq!(r.argmax, argmax(logits));
        let mut sorted: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        sorted.truncate(64);
        assert_eq!(r.top.as_ref().unwrap(), &sorted);
    }
    // Less read back: the same argmax, no rows.
    let next = [[rows[0].argmax], [rows[1].argmax]];
    let chunks = [
        SeqChunk {
            seq: 1,
            tokens: &next[0],
            output: true,
        },
        SeqChunk {
            seq: 0,
            tokens: &next[1],
            output: false,
        },
    ];
    let rows = s.step(&chunks, Readback::Argmax).unwrap();
    assert_eq!(rows.len(), 1, "only chunks with `output` give a row");
    assert!(rows[0].top.is_none() && rows[0].logits.is_none());
    assert_eq!((s.seq_len(0), s.seq_len(1)), (5, 12));
}

#[test]
fn sampling_from_the_candidates_equals_sampling_from_the_row() {
    let f = model(SynthArch::Llama);
    let mut s = Session::new(&CpuBackend, &f, CFG).unwrap();
    let chunk = [SeqChunk {
        seq: 0,
        tokens: PROMPTS[0],
        output: true,
    }];
    let row = s.step(&chunk, Readback::Logits).unwrap().remove(0);
    let cfg = SamplerConfig {
        temperature: 2.0,
        top_k: 40,
        top_p: 0.99,
        min_p: 0.0,
        seed: 11,
        ..SamplerConfig::default()
    };
    let mut full = Sampler::new(cfg);
    let mut cand = Sampler::new(cfg);
    assert_eq!(cand.readback(s.candidates()), Readback::TopK);
    let top_only = RowOut {
        logits: None,
        ..row.clone()
    };
    let a: Vec<u32> = (0..200)
        .map(|_| full.sample(row.logits.as_ref().unwrap(), &[]))
        .collect();
    let b: Vec<u32> = (0..200)
        .map(|_| cand.sample_row(&top_only, &[]).unwrap())
        .collect();
    assert_eq!(a, b);
    assert!(
        a.iter().any(|&t| t != row.argmax),
        "temperature 2 draws more than the argmax"
    );

    // Penalties and top_k = 0 need the whole row; greedy only the argmax.
    let penal = Sampler::new(SamplerConfig {
        presence_penalty: 0.5,
        ..cfg
    });
    assert_eq!(penal.readback(64), Readback::Logits);
    assert_eq!(
        Sampler::new(SamplerConfig { top_k: 0, ..cfg }).readback(64),
        Readback::Logits
    );
    assert_eq!(
        Sampler::new(SamplerConfig { top_k: 65, ..cfg }).readback(64),
        Readback::Logits
    );
    let mut greedy = Sampler::new(SamplerConfig::greedy());
    assert_eq!(greedy.readback(64), Readback::Argmax);
    let argmax_only = RowOut {
        argmax: row.argmax,
        top: None,
        logits: None,
        sampled: None,
    };
    assert_eq!(greedy.sample_row(&argmax_only, &[]).unwrap(), row.argmax);
    let mut penal = penal;
    assert!(
        penal.sample_row(&argmax_only, &[]).is_err(),
        "too little read back"
    );
}

#[test]
fn misuse_is_an_error() {
    let f = model(SynthArch::Llama);
    let mut s = Session::with_sequences(&CpuBackend, &f, CFG, 2).unwrap();
    let one = |seq, tokens| SeqChunk {
        seq,
        tokens,
        output: true,
    };
    let e = s.step(&[one(2, &[1])], Readback::Argmax).unwrap_err();
    assert!(matches!(e, ModelError::BadSession(_)), "{e}");
    let e = s
        .step(&[one(0, &[1]), one(0, &[2])], Readback::Argmax)
        .unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    s.step(&[one(1, &[1; 20])], Readback::Argmax).unwrap();
    let e = s
        .step(&[one(0, &[1]), one(1, &[1; 5])], Readback::Argmax)
        .unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::ContextFull {
                need: 25,
                ctx: 24,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        (s.seq_len(0), s.seq_len(1)),
        (0, 20),
        "a failed step appends nothing"
    );
    s.clear_seq(1);
    assert_eq!(s.seq_len(1), 0);
    assert!(Session::with_sequences(&CpuBackend, &f, CFG, 0).is_err());
}
