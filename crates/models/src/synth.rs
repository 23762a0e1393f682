//! Synthetic models: GGUF files with random weights and a real architecture's exact tensor
//! shapes, for tests and for measuring speed where real models cannot be downloaded.

use rayon::prelude::*;
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

impl LlamaShape {
    /// The tests' small model: 2 layers 64 wide, 4 query and 2 KV heads, an FFN of 128, a
    /// 300-token vocabulary, 256 positions, RoPE base 10,000, untied output. Tests override
    /// fields with `LlamaShape { n_vocab: 96, ..LlamaShape::TINY }`.
    pub const TINY: LlamaShape = LlamaShape {
        n_vocab: 300,
        n_embd: 64,
        n_layer: 2,
        n_ff: 128,
        n_head: 4,
        n_head_kv: 2,
        n_ctx_train: 256,
        rope_base: 10_000.0,
        tied_output: false,
    };
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
    /// Qwen3 with every feed-forward `n_expert` experts of `n_ff_exp` (the shape's `n_ff` is
    /// only written as `feed_forward_length`), `n_used` a token.
    Qwen3Moe {
        head_dim: u64,
        n_expert: u64,
        n_used: u64,
        n_ff_exp: u64,
    },
    /// QK-norm, post-attention/FFN norms, local layers attending to the last `window` positions.
    Gemma3 {
        head_dim: u64,
        window: u32,
    },
    /// A BERT encoder (embedding model): biases everywhere, LayerNorms, two token types, mean
    /// pooling, a WordPiece vocabulary (the shape's `n_head_kv`, RoPE and output are unused).
    Bert,
}

impl SynthArch {
    fn name(self) -> &'static str {
        match self {
            SynthArch::Llama => "llama",
            SynthArch::Qwen2 => "qwen2",
            SynthArch::Qwen3 { .. } => "qwen3",
            SynthArch::Qwen3Moe { .. } => "qwen3moe",
            SynthArch::Gemma3 { .. } => "gemma3",
            SynthArch::Bert => "bert",
        }
    }
}

/// Values per independently seeded chunk of a tensor (rounded to whole rows): small enough to keep
/// every thread busy, large enough that the per-chunk overhead vanishes.
const CHUNK_VALUES: u64 = 1 << 16;

/// Deterministic pseudo-random values, roughly N(mean, std²) (sum of uniforms).
fn randn(out: &mut [f32], mean: f32, std: f32, mut state: u64) {
    for x in out {
        let mut acc = 0.0f32;
        for _ in 0..4 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            acc += (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        *x = mean + acc * std * 1.732;
    }
}

/// SplitMix64's finalizer: spreads nearby inputs (chunk indices) over unrelated states.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random state of chunk `chunk` of tensor `name`: each chunk is generated on its own, so the
/// file is the same whatever the number of threads that wrote it.
fn chunk_seed(seed: u64, name: &str, chunk: u64) -> u64 {
    let fnv = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    mix(mix(seed ^ fnv).wrapping_add(chunk))
}

/// Adds tensor `name` of random values ~N(mean, std²) in `dtype`. Rows (`shape[0]` values) are
/// generated and quantized in parallel, a chunk at a time, so at most one chunk of f32 per thread
/// is held besides the tensor's own bytes.
pub fn random_tensor(
    w: &mut GgufWriter,
    name: &str,
    dtype: DType,
    shape: &[u64],
    (mean, std): (f32, f32),
    seed: u64,
) -> Result<(), ModelError> {
    let row = shape[0];
    let n_rows: u64 = shape[1..].iter().product();
    let row_bytes = dtype
        .row_bytes(row)
        .ok_or_else(|| ModelError::BadMetadata {
            key: name.into(),
            value: format!("{shape:?}"),
            why: format!("rows of {row} values are not whole {dtype} blocks"),
        })?;
    let chunk_rows = (CHUNK_VALUES / row).max(1);
    let mut data = vec![0u8; (row_bytes * n_rows) as usize];
    data.par_chunks_mut((row_bytes * chunk_rows) as usize)
        .enumerate()
        .try_for_each(|(i, out)| {
            let mut values = vec![0f32; out.len() / row_bytes as usize * row as usize];
            randn(&mut values, mean, std, chunk_seed(seed, name, i as u64));
            quant::quantize(dtype, &values, out)
        })?;
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
    if arch == SynthArch::Bert {
        return bert_gguf(s, dtype, seed);
    }
    let mut w = GgufWriter::new();
    let a = arch.name();
    let head_dim = match arch {
        SynthArch::Llama | SynthArch::Qwen2 | SynthArch::Bert => s.n_embd / s.n_head,
        SynthArch::Qwen3 { head_dim }
        | SynthArch::Qwen3Moe { head_dim, .. }
        | SynthArch::Gemma3 { head_dim, .. } => head_dim,
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
    if let SynthArch::Qwen3 { .. } | SynthArch::Qwen3Moe { .. } | SynthArch::Gemma3 { .. } = arch {
        md.push((format!("{a}.attention.key_length"), u32_of(head_dim)));
        md.push((format!("{a}.attention.value_length"), u32_of(head_dim)));
    }
    if let SynthArch::Qwen3Moe {
        n_expert,
        n_used,
        n_ff_exp,
        ..
    } = arch
    {
        md.push((format!("{a}.expert_count"), u32_of(n_expert)));
        md.push((format!("{a}.expert_used_count"), u32_of(n_used)));
        md.push((format!("{a}.expert_feed_forward_length"), u32_of(n_ff_exp)));
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
    let (e, v) = (s.n_embd, s.n_vocab);
    let mut add = |name: &str, dtype: DType, shape: &[u64], dist: (f32, f32)| {
        random_tensor(&mut w, name, dtype, shape, dist, seed)
    };
    // Norm weights near 1.
    let ones_ish = (1.0, 0.1);
    add("token_embd.weight", dtype, &[e, v], (0.0, 1.0))?;
    let gemma = matches!(arch, SynthArch::Gemma3 { .. });
    let qk_norm = matches!(arch, SynthArch::Qwen3 { .. } | SynthArch::Qwen3Moe { .. }) || gemma;
    for il in 0..s.n_layer {
        let name = |t: &str| format!("blk.{il}.{t}.weight");
        add(&name("attn_norm"), DType::F32, &[e], ones_ish)?;
        for (t, rows) in [("attn_q", q_rows), ("attn_k", kv), ("attn_v", kv)] {
            add(&name(t), dtype, &[e, rows], (0.0, std))?;
            if arch == SynthArch::Qwen2 {
                let bias = format!("blk.{il}.{t}.bias");
                add(&bias, DType::F32, &[rows], (0.0, 0.5))?;
            }
        }
        if qk_norm {
            add(&name("attn_q_norm"), DType::F32, &[head_dim], ones_ish)?;
            add(&name("attn_k_norm"), DType::F32, &[head_dim], ones_ish)?;
        }
        let out_std = 1.0 / (q_rows as f32).sqrt();
        add(&name("attn_output"), dtype, &[q_rows, e], (0.0, out_std))?;
        if gemma {
            add(&name("post_attention_norm"), DType::F32, &[e], ones_ish)?;
        }
        add(&name("ffn_norm"), DType::F32, &[e], ones_ish)?;
        if let SynthArch::Qwen3Moe {
            n_expert: x,
            n_ff_exp: f,
            ..
        } = arch
        {
            // The router in f32, as converted files keep it.
            add(&name("ffn_gate_inp"), DType::F32, &[e, x], (0.0, std))?;
            for t in ["ffn_gate_exps", "ffn_up_exps"] {
                add(&name(t), dtype, &[e, f, x], (0.0, std))?;
            }
            let down_std = 1.0 / (f as f32).sqrt();
            add(&name("ffn_down_exps"), dtype, &[f, e, x], (0.0, down_std))?;
        } else {
            for t in ["ffn_gate", "ffn_up"] {
                add(&name(t), dtype, &[e, s.n_ff], (0.0, std))?;
            }
            let down_std = 1.0 / (s.n_ff as f32).sqrt();
            add(&name("ffn_down"), dtype, &[s.n_ff, e], (0.0, down_std))?;
        }
        if gemma {
            add(&name("post_ffw_norm"), DType::F32, &[e], ones_ish)?;
        }
    }
    add("output_norm.weight", DType::F32, &[e], ones_ish)?;
    if !s.tied_output {
        add("output.weight", dtype, &[e, v], (0.0, std))?;
    }
    Ok(w.to_vec())
}

/// A tensor to write: name, dtype, extents, and the mean and spread of its values.
type TensorSpec = (String, DType, Vec<u64>, (f32, f32));

/// A BERT encoder GGUF with random weights (see [`SynthArch::Bert`]): matrices in `dtype`,
/// vectors and the token-type table in f32.
fn bert_gguf(s: &LlamaShape, dtype: DType, seed: u64) -> Result<Vec<u8>, ModelError> {
    let mut w = GgufWriter::new();
    let u32_of = |v: u64| Value::U32(v as u32);
    let md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("bert".into())),
        (
            "general.name".into(),
            Value::String("wgllm synthetic bert".into()),
        ),
        ("bert.context_length".into(), u32_of(s.n_ctx_train)),
        ("bert.embedding_length".into(), u32_of(s.n_embd)),
        ("bert.block_count".into(), Value::U32(s.n_layer)),
        ("bert.feed_forward_length".into(), u32_of(s.n_ff)),
        ("bert.attention.head_count".into(), u32_of(s.n_head)),
        (
            "bert.attention.layer_norm_epsilon".into(),
            Value::F32(1e-12),
        ),
        ("bert.attention.causal".into(), Value::Bool(false)),
        ("bert.pooling_type".into(), Value::U32(1)),
        ("tokenizer.ggml.model".into(), Value::String("bert".into())),
        ("tokenizer.ggml.token_type_count".into(), Value::U32(2)),
    ];
    for (k, v) in md.into_iter().chain(wordpiece_vocab(s.n_vocab)?) {
        w.add_metadata(k, v)?;
    }
    let (e, f) = (s.n_embd, s.n_ff);
    let mut specs: Vec<TensorSpec> = vec![
        (
            "token_embd.weight".into(),
            dtype,
            vec![e, s.n_vocab],
            (0.0, 1.0),
        ),
        (
            "token_types.weight".into(),
            DType::F32,
            vec![e, 2],
            (0.0, 0.1),
        ),
        (
            "position_embd.weight".into(),
            dtype,
            vec![e, s.n_ctx_train],
            (0.0, 0.1),
        ),
    ];
    let norm = |specs: &mut Vec<_>, name: &str| {
        specs.push((format!("{name}.weight"), DType::F32, vec![e], (1.0, 0.1)));
        specs.push((format!("{name}.bias"), DType::F32, vec![e], (0.0, 0.1)));
    };
    norm(&mut specs, "token_embd_norm");
    for il in 0..s.n_layer {
        let linear = |specs: &mut Vec<_>, t: &str, n_in: u64, n_out: u64| {
            let std = 1.0 / (n_in as f32).sqrt();
            specs.push((
                format!("blk.{il}.{t}.weight"),
                dtype,
                vec![n_in, n_out],
                (0.0, std),
            ));
            specs.push((
                format!("blk.{il}.{t}.bias"),
                DType::F32,
                vec![n_out],
                (0.0, 0.1),
            ));
        };
        for t in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            linear(&mut specs, t, e, e);
        }
        norm(&mut specs, &format!("blk.{il}.attn_output_norm"));
        linear(&mut specs, "ffn_up", e, f);
        linear(&mut specs, "ffn_down", f, e);
        norm(&mut specs, &format!("blk.{il}.layer_output_norm"));
    }
    for (name, dt, shape, dist) in specs {
        random_tensor(&mut w, &name, dt, &shape, dist, seed)?;
    }
    Ok(w.to_vec())
}

/// BERT's special tokens at their usual ids.
const WORDPIECE_SPECIAL: [(u64, &str); 5] = [
    (0, "[PAD]"),
    (100, "[UNK]"),
    (101, "[CLS]"),
    (102, "[SEP]"),
    (103, "[MASK]"),
];

/// A WordPiece vocabulary of `n >= 200` tokens in llama.cpp's spelling: BERT's special tokens at
/// their ids, every lower-case letter, digit and common punctuation mark as a word start
/// (`▁a`) and letters and digits as continuations (`a`), so any ASCII text tokenizes; the rest
/// are placeholder words.
fn wordpiece_vocab(n: u64) -> Result<Vec<(String, Value)>, ModelError> {
    if n < 200 {
        return Err(ModelError::BadMetadata {
            key: "n_vocab".into(),
            value: n.to_string(),
            why: "a synthetic WordPiece vocabulary needs at least 200 tokens".into(),
        });
    }
    let chars: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    let punct: Vec<char> = ".,!?;:'\"()-".chars().collect();
    let mut tokens: Vec<String> = (0..n).map(|i| format!("\u{2581}w{i}")).collect();
    let mut next = 104usize;
    for c in chars.iter().chain(&punct) {
        tokens[next] = format!("\u{2581}{c}");
        next += 1;
    }
    for c in &chars {
        tokens[next] = c.to_string();
        next += 1;
    }
    let mut types = vec![1i32; n as usize];
    for (id, text) in WORDPIECE_SPECIAL {
        tokens[id as usize] = text.to_string();
        types[id as usize] = 3;
    }
    let id = |k: &str, v: u64| (format!("tokenizer.ggml.{k}"), Value::U32(v as u32));
    Ok(vec![
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(types)),
        ),
        id("padding_token_id", 0),
        id("unknown_token_id", 100),
        id("bos_token_id", 101),
        id("seperator_token_id", 102),
        id("mask_token_id", 103),
    ])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> LlamaShape {
        LlamaShape {
            // 4096 rows of 64 per ffn matrix: several chunks each.
            n_ff: 4096,
            ..LlamaShape::TINY
        }
    }

    fn on_threads(n: usize, dtype: DType, seed: u64) -> Vec<u8> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("thread pool");
        pool.install(|| llama_gguf(&shape(), dtype, seed))
            .expect("synthetic model")
    }

    #[test]
    fn same_file_whatever_the_thread_count() {
        let one = on_threads(1, DType::Q8_0, 5);
        assert_eq!(one, on_threads(3, DType::Q8_0, 5));
        assert_ne!(
            one,
            on_threads(3, DType::Q8_0, 6),
            "the seed changes the weights"
        );
    }

    #[test]
    fn chunks_differ_and_values_have_the_asked_spread() {
        let mut w = GgufWriter::new();
        random_tensor(&mut w, "t", DType::F32, &[64, 4096], (0.0, 0.5), 1).unwrap();
        let file = wgllm_gguf::GgufFile::from_bytes(w.to_vec().into()).unwrap();
        let info = file.tensor("t").unwrap();
        let v: Vec<f32> = file
            .tensor_data(info)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let chunk = CHUNK_VALUES as usize;
        assert_ne!(v[..64], v[chunk..chunk + 64], "each chunk has its own seed");
        let var = v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32;
        assert!((var.sqrt() - 0.5).abs() < 0.02, "std {}", var.sqrt());
    }

    #[test]
    fn rows_of_partial_blocks_are_an_error() {
        let mut w = GgufWriter::new();
        let e = random_tensor(&mut w, "t", DType::Q4_K, &[64, 8], (0.0, 1.0), 1).unwrap_err();
        assert!(e.to_string().contains("not whole"), "{e}");
    }
}
