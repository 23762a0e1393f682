//! A synthetic llama model run through `Session` on the CPU backend: chunked prefill, token-by-
//! token decoding and all-logits evaluation must agree, and a full context is an error.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::{ModelError, Session, SessionConfig};

fn tiny(dtype: DType) -> GgufFile {
    let shape = LlamaShape {
        n_vocab: 96,
        ..LlamaShape::TINY
    };
    GgufFile::from_bytes(Bytes::from(llama_gguf(&shape, dtype, 1).unwrap())).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const PROMPT: [u32; 11] = [1, 5, 9, 3, 77, 12, 40, 2, 95, 0, 33];

#[test]
fn chunked_prefill_equals_token_by_token() {
    let f = tiny(DType::Q8_0);
    let cfg = SessionConfig {
        n_ctx: 32,
        ubatch: 8,
        kv_dtype: DType::F32,
        all_logits: false,
    };
    let mut chunked = Session::new(&CpuBackend, &f, cfg).unwrap();
    let a = chunked.eval(&PROMPT).unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].len(), 96);
    assert_eq!(chunked.n_past(), PROMPT.len());

    let mut single = Session::new(&CpuBackend, &f, SessionConfig { ubatch: 1, ..cfg }).unwrap();
    let mut last = vec![];
    for &t in &PROMPT {
        last = single.eval(&[t]).unwrap();
    }
    let d = max_abs_diff(&a[0], &last[0]);
    assert!(d < 1e-4, "chunked vs single-token logits differ by {d}");
    assert!(a[0].iter().any(|v| v.abs() > 1e-3), "logits are not all ~0");

    // A different history gives different logits (the cache is really read).
    single.reset();
    let other = single.eval(&[4, 4, 4, 33]).unwrap();
    assert!(max_abs_diff(&other[0], &last[0]) > 1e-3);
}

#[test]
fn all_logits_rows_match_prefix_evaluations() {
    let f = tiny(DType::F16);
    let cfg = SessionConfig {
        n_ctx: 16,
        ubatch: 4,
        kv_dtype: DType::F16,
        all_logits: true,
    };
    let mut s = Session::new(&CpuBackend, &f, cfg).unwrap();
    let rows = s.eval(&PROMPT[..6]).unwrap();
    assert_eq!(rows.len(), 6);
    let mut one = Session::new(
        &CpuBackend,
        &f,
        SessionConfig {
            all_logits: false,
            ..cfg
        },
    )
    .unwrap();
    for (i, row) in rows.iter().enumerate() {
        one.reset();
        let want = one.eval(&PROMPT[..=i]).unwrap();
        let d = max_abs_diff(row, &want[0]);
        assert!(d < 1e-4, "row {i} differs by {d}");
    }
}

#[test]
fn full_context_and_bad_tokens_are_errors() {
    let f = tiny(DType::Q8_0);
    let cfg = SessionConfig {
        n_ctx: 8,
        ubatch: 4,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let mut s = Session::new(&CpuBackend, &f, cfg).unwrap();
    let e = s.eval(&PROMPT).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::ContextFull {
                need: 11,
                ctx: 8,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--ctx"), "{e}");
    let e = s.eval(&[500]).unwrap_err();
    assert!(matches!(e, ModelError::BadToken(500)), "{e}");
}
