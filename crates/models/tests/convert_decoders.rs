//! `convert` on decoder checkpoints written here in Hugging Face's layout: the converted models
//! load and run, a Llama's Q/K rows are permuted right (the same weights as a Qwen2 with zero
//! biases, whose NEOX RoPE takes Hugging Face's half-split layout as it is, give the same
//! logits), the byte-level BPE vocabulary tokenizes as the merges say, and a Qwen3 embedding
//! checkpoint (sentence-transformers' bare `Qwen3Model`, last-token pooling) embeds each input
//! of a batch as the decoder's last hidden state.

use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::{json, Value};
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::convert::convert;
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{EmbedConfig, Embedder, Session, SessionConfig};

const E: usize = 32;
const FF: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = E / HEADS;

/// Deterministic values in [-0.5, 0.5).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// A GPT-2 style vocabulary: the 256 byte characters, a few merges, and two added tokens.
fn tokenizer_json(vocab_size: usize) -> (Value, usize) {
    let chars: Vec<String> = (0u8..=255).map(byte_char).collect();
    let mut vocab: serde_json::Map<String, Value> = chars
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), json!(i)))
        .collect();
    let merges = [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
    ];
    for (i, (a, b)) in merges.iter().enumerate() {
        vocab.insert(format!("{a}{b}"), json!(256 + i));
    }
    let n = 256 + merges.len();
    let added = [
        json!({"id": n, "content": "<|endoftext|>", "special": true}),
        json!({"id": n + 1, "content": "<|im_start|>", "special": true}),
    ];
    assert!(n + 2 <= vocab_size);
    let tok = json!({
        "added_tokens": added,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]},
        "model": {"type": "BPE", "vocab": vocab,
                  "merges": merges.iter().map(|(a, b)| format!("{a} {b}")).collect::<Vec<_>>()}
    });
    (tok, n)
}

/// GPT-2's byte-to-character table.
fn byte_char(b: u8) -> String {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(b) {
        return (b as char).to_string();
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap().to_string()
}

/// How a test checkpoint is written.
#[derive(Clone, Copy, Default)]
struct Extras {
    /// Zero q/k/v biases (Qwen2).
    qkv_bias: bool,
    /// Per-head q/k RMS norms (Qwen3).
    qk_norm: bool,
    /// A bare encoder (no `model.` prefix, no `lm_head`) with last-token pooling.
    embedder: bool,
}

/// The output matrix, `[vocab, E]` rows.
fn lm_head() -> Vec<f32> {
    values(300 * E, 2)
}

/// A 2-layer decoder checkpoint in Hugging Face's layout (`[out, in]` rows, half-split RoPE),
/// as `arch`.
fn write_checkpoint(dir: &Path, arch: &str, x: Extras) {
    std::fs::create_dir_all(dir).unwrap();
    let vocab = 300;
    let kv = KV_HEADS * HEAD_DIM;
    let mut t: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        (
            "model.embed_tokens.weight".into(),
            vec![vocab, E],
            values(vocab * E, 1),
        ),
        ("model.norm.weight".into(), vec![E], vec![1.0; E]),
    ];
    if !x.embedder {
        t.push(("lm_head.weight".into(), vec![vocab, E], lm_head()));
    }
    for il in 0..2 {
        let p = |n: &str| format!("model.layers.{il}.{n}");
        let seed = 10 * il as u64;
        for (name, rows, cols) in [
            ("self_attn.q_proj", E, E),
            ("self_attn.k_proj", kv, E),
            ("self_attn.v_proj", kv, E),
            ("self_attn.o_proj", E, E),
            ("mlp.gate_proj", FF, E),
            ("mlp.up_proj", FF, E),
            ("mlp.down_proj", E, FF),
        ] {
            let w = values(
                rows * cols,
                seed + rows as u64 + cols as u64 * 7 + name.len() as u64,
            );
            t.push((p(&format!("{name}.weight")), vec![rows, cols], w));
            let qkv = ["q", "k", "v"]
                .iter()
                .any(|h| name == format!("self_attn.{h}_proj"));
            if x.qkv_bias && qkv {
                t.push((p(&format!("{name}.bias")), vec![rows], vec![0.0; rows]));
            }
        }
        if x.qk_norm {
            for n in ["self_attn.q_norm.weight", "self_attn.k_norm.weight"] {
                let w = values(HEAD_DIM, seed + n.len() as u64)
                    .iter()
                    .map(|v| 1.0 + v)
                    .collect();
                t.push((p(n), vec![HEAD_DIM], w));
            }
        }
        t.push((p("input_layernorm.weight"), vec![E], vec![1.0; E]));
        t.push((p("post_attention_layernorm.weight"), vec![E], vec![1.0; E]));
    }
    t.push((
        "model.rotary_emb.inv_freq".into(),
        vec![HEAD_DIM / 2],
        vec![0.0; HEAD_DIM / 2],
    ));
    if x.embedder {
        for (name, ..) in t.iter_mut() {
            *name = name.strip_prefix("model.").unwrap_or(name).to_string();
        }
        let modules = r#"[{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#;
        std::fs::write(dir.join("modules.json"), modules).unwrap();
        std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        let pooling = r#"{"pooling_mode_lasttoken": true}"#;
        std::fs::write(dir.join("1_Pooling/config.json"), pooling).unwrap();
    }
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = t
        .into_iter()
        .map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView)> = bytes
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let st = safetensors::serialize(views, None).unwrap();
    std::fs::write(dir.join("model.safetensors"), st).unwrap();
    let (mut tok, eos) = tokenizer_json(vocab);
    if x.embedder {
        // Qwen3-Embedding's template appends the EOS its last-token pooling reads.
        tok["post_processor"] = json!({"type": "TemplateProcessing", "single": [
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}]});
    }
    let config = json!({
        "architectures": [arch], "hidden_size": E, "intermediate_size": FF,
        "num_hidden_layers": 2, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "vocab_size": vocab, "eos_token_id": eos, "tie_word_embeddings": false
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("wgllm-convert-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Logits of the last of `tokens` from the GGUF at `path` on the CPU backend.
fn logits(path: &Path, tokens: &[u32]) -> Vec<f32> {
    let f = GgufFile::open(path).unwrap();
    let cfg = SessionConfig {
        n_ctx: 64,
        kv_dtype: DType::F32,
        ..SessionConfig::default()
    };
    let mut s = Session::new(&CpuBackend, &f, cfg).unwrap();
    s.eval(tokens).unwrap().pop().unwrap()
}

#[test]
fn a_converted_llama_rotates_as_hugging_face_does() {
    let dir = scratch("llama");
    write_checkpoint(&dir.join("llama"), "LlamaForCausalLM", Extras::default());
    let bias = Extras {
        qkv_bias: true,
        ..Extras::default()
    };
    write_checkpoint(&dir.join("qwen2"), "Qwen2ForCausalLM", bias);
    let (llama, qwen2) = (dir.join("llama.gguf"), dir.join("qwen2.gguf"));
    let done = convert(&dir.join("llama"), DType::F32, &llama, |_, _| {}).unwrap();
    assert_eq!((done.arch, done.tensors), ("llama", 21));
    convert(&dir.join("qwen2"), DType::F32, &qwen2, |_, _| {}).unwrap();
    let tokens = [5u32, 77, 200, 13, 42, 9, 250];
    let (a, b) = (logits(&llama, &tokens), logits(&qwen2, &tokens));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "llama vs qwen2 logits differ by {worst}");
    // GGUF row 1 of a head is Hugging Face's row 4 (the first of its second half).
    let f = GgufFile::open(&llama).unwrap();
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    let q: Vec<f32> = f
        .tensor_data(q)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let hf = values(E * E, (E + E * 7 + "self_attn.q_proj".len()) as u64);
    assert_eq!(q[E..2 * E], hf[4 * E..5 * E]);
    assert_eq!(q[2 * E..3 * E], hf[E..2 * E]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_converted_vocabulary_tokenizes_by_its_merges() {
    let dir = scratch("vocab");
    write_checkpoint(&dir.join("ck"), "Qwen3ForCausalLM", Extras::default());
    let out = dir.join("m.gguf");
    // Qwen3 needs its q/k norms: refused, naming the first missing one.
    let e = convert(&dir.join("ck"), DType::F16, &out, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("blk.0.attn_q_norm.weight"), "{e}");
    write_checkpoint(&dir.join("l"), "LlamaForCausalLM", Extras::default());
    convert(&dir.join("l"), DType::Q8_0, &out, |_, _| {}).unwrap();
    let f = GgufFile::open(&out).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    // "hello" merges into 259 and " w" into 260; the rest are byte tokens (id = byte), digits
    // one by one, the control token whole.
    let ids = tok.encode("hello world 42<|endoftext|>", false).unwrap();
    assert_eq!(
        ids,
        vec![259, 260, 111, 114, 108, 100, 32, 52, 50, 261],
        "{ids:?}"
    );
    assert_eq!(tok.decode(&ids[..2]), "hello w");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_qwen3_embedder_gives_each_inputs_last_hidden_state() {
    let dir = scratch("qwen3-embed");
    let norms = Extras {
        qk_norm: true,
        ..Extras::default()
    };
    write_checkpoint(&dir.join("lm"), "Qwen3ForCausalLM", norms);
    let embedder = Extras {
        embedder: true,
        ..norms
    };
    write_checkpoint(&dir.join("emb"), "Qwen3Model", embedder);
    let (lm, emb) = (dir.join("lm.gguf"), dir.join("emb.gguf"));
    convert(&dir.join("lm"), DType::F32, &lm, |_, _| {}).unwrap();
    convert(&dir.join("emb"), DType::F32, &emb, |_, _| {}).unwrap();
    let f = GgufFile::open(&emb).unwrap();
    assert_eq!(
        f.get_u32("qwen3.pooling_type").unwrap(),
        3,
        "last-token pooling"
    );
    let inputs: Vec<Vec<u32>> = vec![
        vec![5, 77, 200, 13],
        vec![42],
        vec![9, 250, 3, 3, 7, 100, 11, 2, 60],
    ];
    let mut e = Embedder::new(&f, EmbedConfig::default()).unwrap();
    let vecs = e.embed_ids(&CpuBackend, &inputs, false).unwrap();
    let head = lm_head();
    for (ids, v) in inputs.iter().zip(&vecs) {
        let want = logits(&lm, ids);
        let got: Vec<f32> = head
            .chunks(E)
            .map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum())
            .collect();
        let worst = want
            .iter()
            .zip(&got)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < 1e-4,
            "{ids:?}: output · embedding differs from the logits by {worst}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn llama3_rope_factors_are_written_and_applied() {
    let dir = scratch("llama3");
    let ck = dir.join("ck");
    write_checkpoint(&ck, "LlamaForCausalLM", Extras::default());
    let plain = dir.join("plain.gguf");
    convert(&ck, DType::F32, &plain, |_, _| {}).unwrap();
    let tokens = [5u32, 77, 200, 13, 42, 9, 250];
    let base = logits(&plain, &tokens);
    let with_scaling = |factor: f64, name: &str| {
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(ck.join("config.json")).unwrap())
                .unwrap();
        cfg["rope_scaling"] = json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
        std::fs::write(ck.join("config.json"), cfg.to_string()).unwrap();
        let out = dir.join(name);
        convert(&ck, DType::F32, &out, |_, _| {}).unwrap();
        assert!(GgufFile::open(&out)
            .unwrap()
            .tensor("rope_freqs.weight")
            .is_some());
        logits(&out, &tokens)
    };
    let diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    // Factors of 1 rotate as no scaling does; factors of 8 slow the low frequencies down.
    assert!(diff(&base, &with_scaling(1.0, "one.gguf")) < 1e-5);
    assert!(diff(&base, &with_scaling(8.0, "eight.gguf")) > 1e-3);
    let _ = std::fs::remove_dir_all(&dir);
}
