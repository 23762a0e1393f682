//! Synthetic Qwen2 (Q/K/V biases) and Qwen3 (QK-norm, head_dim from `key_length`) models run
//! through `Session` on the CPU backend: chunked prefill equals token-by-token decoding; bad
//! metadata and unknown architectures are typed errors.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::{GgufFile, GgufWriter, Value};
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::{Architecture, ModelError, Session, SessionConfig};

fn shape(n_head_kv: u64, tied_output: bool) -> LlamaShape {
    LlamaShape {
        n_vocab: 96,
        n_head_kv,
        rope_base: 1_000_000.0,
        tied_output,
        ..LlamaShape::TINY
    }
}

fn file(arch: SynthArch, s: &LlamaShape) -> GgufFile {
    let bytes = model_gguf(arch, s, DType::Q8_0, 3).unwrap();
    GgufFile::from_bytes(Bytes::from(bytes)).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const PROMPT: [u32; 11] = [1, 5, 9, 3, 77, 12, 40, 2, 95, 0, 33];

/// Evaluates `PROMPT` in chunks of up to 8 and one token at a time; the last logits must agree.
fn chunked_equals_token_by_token(f: &GgufFile) {
    let cfg = SessionConfig {
        n_ctx: 32,
        ubatch: 8,
        kv_dtype: DType::F32,
        all_logits: false,
    };
    let mut chunked = Session::new(&CpuBackend, f, cfg).unwrap();
    let a = chunked.eval(&PROMPT).unwrap();
    let mut single = Session::new(&CpuBackend, f, SessionConfig { ubatch: 1, ..cfg }).unwrap();
    let mut last = vec![];
    for &t in &PROMPT {
        last = single.eval(&[t]).unwrap();
    }
    let d = max_abs_diff(&a[0], &last[0]);
    assert!(d < 1e-4, "chunked vs single-token logits differ by {d}");
    assert!(a[0].iter().any(|v| v.abs() > 1e-3), "logits are ~0");
}

#[test]
fn qwen2_chunked_prefill_equals_token_by_token() {
    let f = file(SynthArch::Qwen2, &shape(2, false));
    assert!(matches!(
        Architecture::from_gguf(&f).unwrap(),
        Architecture::Qwen2(_)
    ));
    assert!(f.tensor("blk.1.attn_v.bias").is_some());
    chunked_equals_token_by_token(&f);
}

#[test]
fn qwen3_chunked_prefill_equals_token_by_token() {
    // head_dim 32 while n_embd / n_head is 16: Q is 128 wide, the output projection 128 → 64.
    let f = file(SynthArch::Qwen3 { head_dim: 32 }, &shape(2, true));
    let arch = Architecture::from_gguf(&f).unwrap();
    assert!(matches!(arch, Architecture::Qwen3(_)));
    assert_eq!(arch.hparams().head_dim, 32);
    assert!(arch.hparams().tied_output);
    chunked_equals_token_by_token(&f);
}

#[test]
fn qwen2_biases_are_applied() {
    // The same file with the biases zeroed gives different logits.
    let s = shape(2, true);
    let bytes = model_gguf(SynthArch::Qwen2, &s, DType::F32, 3).unwrap();
    let f = GgufFile::from_bytes(Bytes::from(bytes)).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for t in f.tensors() {
        let mut data = f.tensor_data(t).unwrap().to_vec();
        if t.name().ends_with(".bias") {
            data.fill(0);
        }
        w.add_tensor(t.name(), t.dtype(), t.shape(), data).unwrap();
    }
    let zeroed = GgufFile::from_bytes(Bytes::from(w.to_vec())).unwrap();
    let cfg = SessionConfig {
        n_ctx: 16,
        ubatch: 4,
        kv_dtype: DType::F32,
        all_logits: false,
    };
    let a = Session::new(&CpuBackend, &f, cfg)
        .unwrap()
        .eval(&PROMPT[..5]);
    let b = Session::new(&CpuBackend, &zeroed, cfg)
        .unwrap()
        .eval(&PROMPT[..5]);
    let d = max_abs_diff(&a.unwrap()[0], &b.unwrap()[0]);
    assert!(d > 1e-3, "biases make no difference ({d})");
}

#[test]
fn kv_heads_not_dividing_heads_is_bad_metadata() {
    let f = file(SynthArch::Qwen3 { head_dim: 32 }, &shape(3, true));
    match Architecture::from_gguf(&f).unwrap_err() {
        ModelError::BadMetadata { key, value, .. } => {
            assert_eq!(key, "qwen3.attention.head_count_kv");
            assert_eq!(value, "3");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn unknown_architecture_lists_the_supported_ones() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("mamba9".into()))
        .unwrap();
    let f = GgufFile::from_bytes(Bytes::from(w.to_vec())).unwrap();
    let e = Architecture::from_gguf(&f).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ModelError::UnknownArchitecture { .. }), "{msg}");
    for name in ["mamba9", "llama", "qwen2", "qwen3", "gemma3"] {
        assert!(msg.contains(name), "{msg}");
    }
}
