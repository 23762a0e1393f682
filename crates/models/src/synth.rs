//! Synthetic models: GGUF files with random weights and a real architecture's exact tensor
//! shapes, for tests and for measuring speed where real models cannot be downloaded.

use wgllm_core::{quant, DType};
use wgllm_gguf::{Array, GgufWriter, Value};

use crate::error::ModelError;

/// Shape of a synthetic llama-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaShape {
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u32,
    pub n_ff: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub n_ctx_train: u64,
    pub rope_base: f32,
    pub tied_output: bool,
}

/// Deterministic pseudo-random values, roughly N(0, std²) (sum of uniforms).
fn randn(n: usize, std: f32, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let mut acc = 0.0f32;
            for _ in 0..4 {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                acc += (*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            }
            acc * std * 1.732
        })
        .collect()
}

fn tensor(
    w: &mut GgufWriter,
    name: &str,
    dtype: DType,
    shape: &[u64],
    values: &[f32],
) -> Result<(), ModelError> {
    let n: u64 = shape.iter().product();
    let bytes = dtype.row_bytes(n).ok_or_else(|| ModelError::BadMetadata {
        key: name.into(),
        value: format!("{shape:?}"),
        why: format!("not whole {dtype} blocks"),
    })?;
    let mut data = vec![0u8; bytes as usize];
    quant::quantize(dtype, values, &mut data)?;
    w.add_tensor(name, dtype, shape, data)?;
    Ok(())
}

/// Writes a llama-architecture GGUF with random weights: matrices in `dtype`, norms in f32, and a
/// placeholder vocabulary (`<tok_N>`).
pub fn llama_gguf(s: &LlamaShape, dtype: DType, seed: u64) -> Result<Vec<u8>, ModelError> {
    let mut seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut w = GgufWriter::new();
    let head_dim = s.n_embd / s.n_head;
    let kv = head_dim * s.n_head_kv;
    let md: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        (
            "general.name",
            Value::String("wgllm synthetic llama".into()),
        ),
        ("llama.context_length", Value::U32(s.n_ctx_train as u32)),
        ("llama.embedding_length", Value::U32(s.n_embd as u32)),
        ("llama.block_count", Value::U32(s.n_layer)),
        ("llama.feed_forward_length", Value::U32(s.n_ff as u32)),
        ("llama.attention.head_count", Value::U32(s.n_head as u32)),
        (
            "llama.attention.head_count_kv",
            Value::U32(s.n_head_kv as u32),
        ),
        ("llama.rope.freq_base", Value::F32(s.rope_base)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(
                (0..s.n_vocab).map(|i| format!("<tok_{i}>")).collect(),
            )),
        ),
    ];
    for (k, v) in md {
        w.add_metadata(k, v)?;
    }
    let std = 1.0 / (s.n_embd as f32).sqrt();
    let emb = randn((s.n_embd * s.n_vocab) as usize, 1.0, &mut seed);
    tensor(
        &mut w,
        "token_embd.weight",
        dtype,
        &[s.n_embd, s.n_vocab],
        &emb,
    )?;
    let ones_ish = |n: u64, seed: &mut u64| {
        randn(n as usize, 0.1, seed)
            .into_iter()
            .map(|x| 1.0 + x)
            .collect::<Vec<_>>()
    };
    for il in 0..s.n_layer {
        let name = |t: &str| format!("blk.{il}.{t}.weight");
        let norm = ones_ish(s.n_embd, &mut seed);
        tensor(&mut w, &name("attn_norm"), DType::F32, &[s.n_embd], &norm)?;
        for (t, rows) in [("attn_q", s.n_embd), ("attn_k", kv), ("attn_v", kv)] {
            let v = randn((s.n_embd * rows) as usize, std, &mut seed);
            tensor(&mut w, &name(t), dtype, &[s.n_embd, rows], &v)?;
        }
        let v = randn((s.n_embd * s.n_embd) as usize, std, &mut seed);
        tensor(
            &mut w,
            &name("attn_output"),
            dtype,
            &[s.n_embd, s.n_embd],
            &v,
        )?;
        let norm = ones_ish(s.n_embd, &mut seed);
        tensor(&mut w, &name("ffn_norm"), DType::F32, &[s.n_embd], &norm)?;
        for t in ["ffn_gate", "ffn_up"] {
            let v = randn((s.n_embd * s.n_ff) as usize, std, &mut seed);
            tensor(&mut w, &name(t), dtype, &[s.n_embd, s.n_ff], &v)?;
        }
        let v = randn(
            (s.n_ff * s.n_embd) as usize,
            1.0 / (s.n_ff as f32).sqrt(),
            &mut seed,
        );
        tensor(&mut w, &name("ffn_down"), dtype, &[s.n_ff, s.n_embd], &v)?;
    }
    let norm = ones_ish(s.n_embd, &mut seed);
    tensor(&mut w, "output_norm.weight", DType::F32, &[s.n_embd], &norm)?;
    if !s.tied_output {
        let v = randn((s.n_embd * s.n_vocab) as usize, std, &mut seed);
        tensor(&mut w, "output.weight", dtype, &[s.n_embd, s.n_vocab], &v)?;
    }
    Ok(w.to_vec())
}
