//! A synthetic Gemma 3 model run through `Session` on the CPU backend: chunked prefill equals
//! token-by-token decoding across the sliding window, the window really limits what local layers
//! see, and global layers still see the whole context.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::{ModelError, Session, SessionConfig};

/// Layers 0–4 are local, layer 5 (when present) global.
fn gemma(n_layer: u32, window: u32) -> GgufFile {
    let shape = LlamaShape {
        n_vocab: 96,
        n_layer,
        rope_base: 1_000_000.0,
        tied_output: true,
        ..LlamaShape::TINY
    };
    let arch = SynthArch::Gemma3 {
        head_dim: 32,
        window,
    };
    let bytes = model_gguf(arch, &shape, DType::Q8_0, 7).unwrap();
    GgufFile::from_bytes(Bytes::from(bytes)).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const PROMPT: [u32; 11] = [1, 5, 9, 3, 77, 12, 40, 2, 95, 0, 33];

const CFG: SessionConfig = SessionConfig {
    n_ctx: 32,
    ubatch: 8,
    kv_dtype: DType::F32,
    all_logits: false,
};

/// Last-token logits after each token of `tokens`, fed one at a time.
fn token_by_token(f: &GgufFile, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut s = Session::new(&CpuBackend, f, SessionConfig { ubatch: 1, ..CFG }).unwrap();
    tokens
        .iter()
        .map(|&t| s.eval(&[t]).unwrap().remove(0))
        .collect()
}

#[test]
fn chunked_prefill_equals_token_by_token_across_the_window() {
    // Chunks of 8, 2 and 1 tokens; a window of 4 cuts through the first chunk.
    let f = gemma(6, 4);
    let cfg = SessionConfig {
        all_logits: true,
        ..CFG
    };
    let mut chunked = Session::new(&CpuBackend, &f, cfg).unwrap();
    let rows = chunked.eval(&PROMPT).unwrap();
    assert_eq!(rows.len(), PROMPT.len());
    let single = token_by_token(&f, &PROMPT);
    for (i, (a, b)) in rows.iter().zip(&single).enumerate() {
        let d = max_abs_diff(a, b);
        assert!(
            d < 1e-4,
            "position {i}: chunked vs single-token differ by {d}"
        );
    }
    assert!(rows[10].iter().any(|v| v.abs() > 1e-3), "logits are ~0");
}

#[test]
fn sliding_window_limits_attention() {
    // Same weights (same seed), only the window differs.
    let narrow = token_by_token(&gemma(6, 4), &PROMPT);
    let wide = token_by_token(&gemma(6, 64), &PROMPT);
    for (p, (a, b)) in narrow.iter().zip(&wide).enumerate() {
        let d = max_abs_diff(a, b);
        if p < 4 {
            assert_eq!(d, 0.0, "position {p} sees at most 4 tokens either way");
        } else {
            assert!(d > 1e-3, "position {p}: window 4 and 64 agree ({d})");
        }
    }
}

#[test]
fn window_of_one_isolates_local_layers_and_global_layers_see_the_context() {
    // With a window of 1 a local layer attends only to the token itself, so a model of local
    // layers only gives the same logits for a token whatever precedes it (RoPE rotates q and k,
    // not v). A global sixth layer brings the history back.
    let history = [4, 50, 61, 8, 33];
    let local_only = gemma(5, 1);
    let a = token_by_token(&local_only, &history);
    let b = token_by_token(&local_only, &history[4..]);
    let d = max_abs_diff(&a[4], &b[0]);
    assert!(d < 1e-5, "local-only model depends on history ({d})");

    let with_global = gemma(6, 1);
    let a = token_by_token(&with_global, &history);
    let b = token_by_token(&with_global, &history[4..]);
    let d = max_abs_diff(&a[4], &b[0]);
    assert!(d > 1e-3, "the global layer ignores the history ({d})");
}

#[test]
fn zero_sliding_window_is_bad_metadata() {
    let e = Session::new(&CpuBackend, &gemma(2, 0), CFG).err().unwrap();
    match e {
        ModelError::BadMetadata { key, .. } => assert_eq!(key, "gemma3.attention.sliding_window"),
        other => panic!("{other}"),
    }
}
