//! Synthetic models: GGUF files with random weights and a real architecture's exact tensor
//! shapes, for tests and for measuring speed where real models cannot be downloaded.

use wgllm_core::{quant, DType};
use wgllm_gguf::{Array, GgufWriter, Value};

use crate::error::ModelError;

/// Shape of a synthetic decoder (of any [`SynthArch`]).
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

/// The architecture a synthetic model is written for, with what only it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthArch {
    Llama,
    /// Q/K/V biases.
    Qwen2,
    /// QK-norm; `head_dim` is written as `attention.key_length`.
    Qwen3 {
        head_dim: u64,
    },
    /// QK-norm, post-attention/FFN norms, local layers attending to the last `window` positions.
    Gemma3 {
        head_dim: u64,
        window: u32,
    },
}

impl SynthArch {
    fn name(self) -> &'static str {
        match self {
            SynthArch::Llama => "llama",
            SynthArch::Qwen2 => "qwen2",
            SynthArch::Qwen3 { .. } => "qwen3",
            SynthArch::Gemma3 { .. } => "gemma3",
        }
    }
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
    model_gguf(SynthArch::Llama, s, dtype, seed)
}

/// Writes a GGUF of architecture `arch` with random weights: matrices in `dtype`, norms and
/// biases in f32, and a placeholder vocabulary (`<tok_N>`). Norm weights are near 1 (for Gemma 3
/// that is the stored value, the converter's `1 + w`).
pub fn model_gguf(
    arch: SynthArch,
    s: &LlamaShape,
    dtype: DType,
    seed: u64,
) -> Result<Vec<u8>, ModelError> {
    let mut seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut w = GgufWriter::new();
    let a = arch.name();
    let head_dim = match arch {
        SynthArch::Llama | SynthArch::Qwen2 => s.n_embd / s.n_head,
        SynthArch::Qwen3 { head_dim } | SynthArch::Gemma3 { head_dim, .. } => head_dim,
    };
    let (q_rows, kv) = (head_dim * s.n_head, head_dim * s.n_head_kv);
    let u32_of = |v: u64| Value::U32(v as u32);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        (
            "general.name".into(),
            Value::String(format!("wgllm synthetic {a}")),
        ),
        (format!("{a}.context_length"), u32_of(s.n_ctx_train)),
        (format!("{a}.embedding_length"), u32_of(s.n_embd)),
        (format!("{a}.block_count"), Value::U32(s.n_layer)),
        (format!("{a}.feed_forward_length"), u32_of(s.n_ff)),
        (format!("{a}.attention.head_count"), u32_of(s.n_head)),
        (format!("{a}.attention.head_count_kv"), u32_of(s.n_head_kv)),
        (format!("{a}.rope.freq_base"), Value::F32(s.rope_base)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
    ];
    if let SynthArch::Qwen3 { .. } | SynthArch::Gemma3 { .. } = arch {
        md.push((format!("{a}.attention.key_length"), u32_of(head_dim)));
        md.push((format!("{a}.attention.value_length"), u32_of(head_dim)));
    }
    if let SynthArch::Gemma3 { window, .. } = arch {
        md.push((format!("{a}.attention.sliding_window"), Value::U32(window)));
    }
    md.push(("tokenizer.ggml.model".into(), Value::String("gpt2".into())));
    md.extend(placeholder_vocab(s.n_vocab));
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
    let gemma = matches!(arch, SynthArch::Gemma3 { .. });
    let qk_norm = matches!(arch, SynthArch::Qwen3 { .. }) || gemma;
    for il in 0..s.n_layer {
        let name = |t: &str| format!("blk.{il}.{t}.weight");
        let norm = |w: &mut GgufWriter, t: &str, n: u64, seed: &mut u64| {
            tensor(w, &name(t), DType::F32, &[n], &ones_ish(n, seed))
        };
        norm(&mut w, "attn_norm", s.n_embd, &mut seed)?;
        for (t, rows) in [("attn_q", q_rows), ("attn_k", kv), ("attn_v", kv)] {
            let v = randn((s.n_embd * rows) as usize, std, &mut seed);
            tensor(&mut w, &name(t), dtype, &[s.n_embd, rows], &v)?;
            if arch == SynthArch::Qwen2 {
                let b = randn(rows as usize, 0.5, &mut seed);
                let bias = format!("blk.{il}.{t}.bias");
                tensor(&mut w, &bias, DType::F32, &[rows], &b)?;
            }
        }
        if qk_norm {
            norm(&mut w, "attn_q_norm", head_dim, &mut seed)?;
            norm(&mut w, "attn_k_norm", head_dim, &mut seed)?;
        }
        let v = randn(
            (q_rows * s.n_embd) as usize,
            1.0 / (q_rows as f32).sqrt(),
            &mut seed,
        );
        tensor(&mut w, &name("attn_output"), dtype, &[q_rows, s.n_embd], &v)?;
        if gemma {
            norm(&mut w, "post_attention_norm", s.n_embd, &mut seed)?;
        }
        norm(&mut w, "ffn_norm", s.n_embd, &mut seed)?;
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
        if gemma {
            norm(&mut w, "post_ffw_norm", s.n_embd, &mut seed)?;
        }
    }
    let norm = ones_ish(s.n_embd, &mut seed);
    tensor(&mut w, "output_norm.weight", DType::F32, &[s.n_embd], &norm)?;
    if !s.tied_output {
        let v = randn((s.n_embd * s.n_vocab) as usize, std, &mut seed);
        tensor(&mut w, "output.weight", dtype, &[s.n_embd, s.n_vocab], &v)?;
    }
    Ok(w.to_vec())
}

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the others map to
/// U+0100 onwards, so every byte is a visible character.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(b) {
        return b as char;
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).expect("below U+0200")
}

/// A placeholder vocabulary of `n` tokens. With room for them (n > 256), the first 256 tokens are
/// the byte-level BPE bytes (no merges), so any text tokenizes one token per byte, and the last
/// token is `<|endoftext|>` (control, EOS); otherwise tokens are `<tok_N>`.
fn placeholder_vocab(n: u64) -> Vec<(String, Value)> {
    if n <= 256 {
        let tokens = (0..n).map(|i| format!("<tok_{i}>")).collect();
        return vec![(
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        )];
    }
    let tokens: Vec<String> = (0..n)
        .map(|i| match i {
            0..=255 => byte_char(i as u8).to_string(),
            i if i == n - 1 => "<|endoftext|>".to_string(),
            i => format!("<tok_{i}>"),
        })
        .collect();
    let types: Vec<i32> = (0..n).map(|i| if i == n - 1 { 3 } else { 1 }).collect();
    vec![
        ("tokenizer.ggml.pre".into(), Value::String("default".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(vec![])),
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            Value::U32((n - 1) as u32),
        ),
        (
            "tokenizer.ggml.bos_token_id".into(),
            Value::U32((n - 1) as u32),
        ),
    ]
}
