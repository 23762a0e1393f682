//! Synthetic Qwen2 (Q/K/V biases), Qwen3 (QK-norm, head_dim from `key_length`) and Qwen3-MoE
//! (mixture-of-experts feed-forwards) models run through `Session` on the CPU backend: chunked
//! prefill equals token-by-token decoding; a MoE of identical experts equals the dense model;
//! bad metadata and unknown architectures are typed errors.

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

/// `f` with every tensor's bytes passed through `edit(name, bytes)`.
fn edited(f: &GgufFile, edit: impl Fn(&str, &mut Vec<u8>)) -> GgufFile {
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for t in f.tensors() {
        let mut data = f.tensor_data(t).unwrap().to_vec();
        edit(t.name(), &mut data);
        w.add_tensor(t.name(), t.dtype(), t.shape(), data).unwrap();
    }
    GgufFile::from_bytes(Bytes::from(w.to_vec())).unwrap()
}

/// The last logits of `prompt` on the CPU, in chunks of `ubatch`.
fn logits(f: &GgufFile, prompt: &[u32], ubatch: usize) -> Vec<f32> {
    let cfg = SessionConfig {
        n_ctx: 16,
        ubatch,
        kv_dtype: DType::F32,
        all_logits: false,
    };
    let mut s = Session::new(&CpuBackend, f, cfg).unwrap();
    s.eval(prompt).unwrap().remove(0)
}

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
    let zeroed = edited(&f, |name, data| {
        if name.ends_with(".bias") {
            data.fill(0);
        }
    });
    let d = max_abs_diff(
        &logits(&f, &PROMPT[..5], 4),
        &logits(&zeroed, &PROMPT[..5], 4),
    );
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
    for name in ["mamba9", "llama", "qwen2", "qwen3", "qwen3moe", "gemma3"] {
        assert!(msg.contains(name), "{msg}");
    }
}

/// A Qwen3-MoE shape: 8 experts of 64, 2 a token.
fn moe_arch() -> SynthArch {
    SynthArch::Qwen3Moe {
        head_dim: 32,
        n_expert: 8,
        n_used: 2,
        n_ff_exp: 64,
    }
}

#[test]
fn qwen3moe_chunked_prefill_equals_token_by_token() {
    let f = file(moe_arch(), &shape(2, false));
    let arch = Architecture::from_gguf(&f).unwrap();
    let Architecture::Qwen3Moe(c) = &arch else {
        panic!("{arch:?}");
    };
    assert_eq!(
        (c.moe.n_expert, c.moe.n_expert_used, c.moe.n_ff_exp),
        (8, 2, 64)
    );
    assert!(c.moe.norm_weights);
    chunked_equals_token_by_token(&f);
}

/// The experts' outputs are what the logits depend on: zeroing one expert's down projection
/// changes them (that expert is picked for some prompt token), and zeroing the router makes
/// every expert equally probable (ties to the lower ids: experts 0 and 1 for every token).
#[test]
fn qwen3moe_experts_and_router_are_used() {
    let s = shape(2, false);
    let bytes = model_gguf(moe_arch(), &s, DType::F32, 3).unwrap();
    let f = GgufFile::from_bytes(Bytes::from(bytes)).unwrap();
    let base = logits(&f, &PROMPT, 8);
    // Expert e's down projection is bytes e·64·64·4 .. of ffn_down_exps (f32 [64, 64, 8]).
    let expert_bytes = 64 * 64 * 4;
    let mut changed = 0;
    for e in 0..8 {
        let zeroed = edited(&f, |name, data| {
            if name.ends_with("ffn_down_exps.weight") {
                data[e * expert_bytes..(e + 1) * expert_bytes].fill(0);
            }
        });
        if max_abs_diff(&base, &logits(&zeroed, &PROMPT, 8)) > 1e-4 {
            changed += 1;
        }
    }
    assert!(changed >= 2, "only {changed} experts change the logits");
    // A zero router: uniform probabilities, experts 0 and 1 for every token, each weighted 1/2.
    let flat = edited(&f, |name, data| {
        if name.ends_with("ffn_gate_inp.weight") {
            data.fill(0);
        }
    });
    let d = max_abs_diff(&base, &logits(&flat, &PROMPT, 8));
    assert!(d > 1e-3, "the router makes no difference ({d})");
}

/// A Qwen3-MoE whose experts are all copies of a dense Qwen3's feed-forward gives the dense
/// model's logits, whatever the router says: the picked experts' weights sum to 1 after the
/// renormalization, and each expert computes the dense FFN. Two of three experts a token, so
/// the sum over experts and the weights are exercised, with a random router.
#[test]
fn qwen3moe_of_identical_experts_equals_the_dense_model() {
    let s = shape(2, false);
    let dense = GgufFile::from_bytes(Bytes::from(
        model_gguf(SynthArch::Qwen3 { head_dim: 32 }, &s, DType::F32, 3).unwrap(),
    ))
    .unwrap();
    let (n_expert, n_used) = (3u64, 2u64);
    let mut w = GgufWriter::new();
    for (k, v) in dense.metadata() {
        let k = match k.strip_prefix("qwen3.") {
            Some(rest) => format!("qwen3moe.{rest}"),
            None => k.clone(),
        };
        let v = match k.as_str() {
            "general.architecture" => Value::String("qwen3moe".into()),
            _ => v.clone(),
        };
        w.add_metadata(k, v).unwrap();
    }
    w.add_metadata("qwen3moe.expert_count", Value::U32(n_expert as u32))
        .unwrap();
    w.add_metadata("qwen3moe.expert_used_count", Value::U32(n_used as u32))
        .unwrap();
    w.add_metadata(
        "qwen3moe.expert_feed_forward_length",
        Value::U32(s.n_ff as u32),
    )
    .unwrap();
    for t in dense.tensors() {
        let data = dense.tensor_data(t).unwrap().to_vec();
        let Some(base) = ["ffn_gate", "ffn_up", "ffn_down"]
            .into_iter()
            .find(|b| t.name().ends_with(&format!(".{b}.weight")))
        else {
            w.add_tensor(t.name(), t.dtype(), t.shape(), data).unwrap();
            continue;
        };
        let blk = t.name().split('.').take(2).collect::<Vec<_>>().join(".");
        let mut shape = t.shape().to_vec();
        shape.push(n_expert);
        let name = format!("{blk}.{base}_exps.weight");
        w.add_tensor(&name, t.dtype(), &shape, data.repeat(n_expert as usize))
            .unwrap();
        if base == "ffn_gate" {
            // A router of distinct values per expert and token.
            let router: Vec<u8> = (0..s.n_embd * n_expert)
                .flat_map(|i| (((i * 37 % 101) as f32 - 50.0) / 200.0).to_le_bytes())
                .collect();
            let name = format!("{blk}.ffn_gate_inp.weight");
            w.add_tensor(&name, DType::F32, &[s.n_embd, n_expert], router)
                .unwrap();
        }
    }
    let moe = GgufFile::from_bytes(Bytes::from(w.to_vec())).unwrap();
    assert!(matches!(
        Architecture::from_gguf(&moe).unwrap(),
        Architecture::Qwen3Moe(_)
    ));
    let (want, got) = (logits(&dense, &PROMPT, 8), logits(&moe, &PROMPT, 8));
    let d = max_abs_diff(&want, &got);
    assert!(d < 1e-4, "MoE of copies vs dense: {d}");
}
