//! BERT (`BertModel`, and sentence-transformers folders of one) as llama.cpp's `BertModel`
//! converter writes it: `bert.*` hyperparameters, the pooling sentence-transformers states in
//! `1_Pooling/config.json`, and the WordPiece vocabulary in llama.cpp's phantom-space spelling.

use serde_json::Value as Json;
use wgllm_gguf::{Array, GgufWriter, Value};

use super::{read_json, Checkpoint, ConvertError, Mapped, Result};
use crate::arch::bert::Pooling;
use crate::tokenizer::gguf_piece;

/// BERT's special tokens.
const BERT_SPECIAL: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// llama.cpp's token types: normal, and control for the special tokens.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;

/// The GGUF name of checkpoint tensor `hf` (with or without the `bert.` prefix).
pub(super) fn tensor_name(hf: &str) -> Result<Mapped> {
    let name = hf.strip_prefix("bert.").unwrap_or(hf);
    // Training buffers and heads the embedding model does not use.
    if name == "embeddings.position_ids" || name.starts_with("pooler.") || name.starts_with("cls.")
    {
        return Ok(Mapped::Skip);
    }
    let unknown = || ConvertError::UnknownTensor(hf.to_string());
    let (stem, suffix) = name.rsplit_once('.').ok_or_else(unknown)?;
    if suffix != "weight" && suffix != "bias" {
        return Err(unknown());
    }
    let gguf = match stem {
        "embeddings.word_embeddings" => "token_embd".to_string(),
        "embeddings.position_embeddings" => "position_embd".to_string(),
        "embeddings.token_type_embeddings" => "token_types".to_string(),
        "embeddings.LayerNorm" => "token_embd_norm".to_string(),
        _ => {
            let rest = stem.strip_prefix("encoder.layer.").ok_or_else(unknown)?;
            let (il, part) = rest.split_once('.').ok_or_else(unknown)?;
            let il: u32 = il.parse().map_err(|_| unknown())?;
            let part = match part {
                "attention.self.query" => "attn_q",
                "attention.self.key" => "attn_k",
                "attention.self.value" => "attn_v",
                "attention.output.dense" => "attn_output",
                "attention.output.LayerNorm" => "attn_output_norm",
                "intermediate.dense" => "ffn_up",
                "output.dense" => "ffn_down",
                "output.LayerNorm" => "layer_output_norm",
                _ => return Err(unknown()),
            };
            format!("blk.{il}.{part}")
        }
    };
    Ok(Mapped::Keep(format!("{gguf}.{suffix}")))
}

/// Checks that every tensor the model needs was written.
pub(super) fn check_tensors<'a>(
    ck: &Checkpoint,
    names: impl Iterator<Item = &'a str>,
) -> Result<()> {
    let have: std::collections::HashSet<&str> = names.collect();
    let mut need = vec!["token_embd", "position_embd", "token_types"]
        .into_iter()
        .map(|n| format!("{n}.weight"))
        .collect::<Vec<_>>();
    need.push("token_embd_norm.weight".into());
    need.push("token_embd_norm.bias".into());
    for il in 0..ck.cfg_u64("num_hidden_layers")? {
        for part in [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "attn_output_norm",
            "ffn_up",
            "ffn_down",
            "layer_output_norm",
        ] {
            need.push(format!("blk.{il}.{part}.weight"));
            need.push(format!("blk.{il}.{part}.bias"));
        }
    }
    match need.into_iter().find(|n| !have.contains(n.as_str())) {
        Some(missing) => Err(ConvertError::MissingTensor(missing)),
        None => Ok(()),
    }
}

/// The pooling a sentence-transformers folder states (`modules.json` → its Pooling module's
/// `config.json`); mean when the folder has none, as llama.cpp's converter assumes for BERT.
fn pooling(ck: &Checkpoint) -> Result<Pooling> {
    Ok(pooling_of(ck)?.unwrap_or(Pooling::Mean))
}

/// The pooling a sentence-transformers folder states, if it has a Pooling module.
pub(super) fn pooling_of(ck: &Checkpoint) -> Result<Option<Pooling>> {
    let dir = ck.dir();
    let config = |why: String| ConvertError::Config {
        key: "modules.json".into(),
        why,
    };
    if !dir.join("modules.json").exists() {
        return Ok(None);
    }
    let mods = match read_json(dir, "modules.json")? {
        Json::Array(mods) => mods,
        _ => return Err(config("is not an array of modules".into())),
    };
    let mut path = None;
    for m in &mods {
        let kind = m.get("type").and_then(Json::as_str).unwrap_or("");
        match kind.rsplit('.').next().unwrap_or("") {
            // The model itself, and the unit-length scaling every embedding gets anyway.
            "Transformer" | "Normalize" => {}
            "Pooling" => path = m.get("path").and_then(Json::as_str).map(str::to_string),
            // A Dense projection (LaBSE) or anything else changes the embedding: refused.
            _ => {
                return Err(config(format!(
                    "names a {kind:?} module, which wgllm does not run"
                )))
            }
        }
    }
    let Some(path) = path else {
        return Ok(None);
    };
    let cfg = read_json(&dir.join(&path), "config.json")?;
    let on = |k: &str| cfg.get(k).and_then(Json::as_bool).unwrap_or(false);
    let modes: Vec<Pooling> = [
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_cls_token", Pooling::Cls),
        ("pooling_mode_lasttoken", Pooling::Last),
    ]
    .into_iter()
    .filter(|(k, _)| on(k))
    .map(|(_, p)| p)
    .collect();
    let others = [
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
    ];
    match modes.as_slice() {
        [p] if !others.iter().any(|k| on(k)) => Ok(Some(*p)),
        _ => Err(ConvertError::Config {
            key: format!("{path}/config.json"),
            why: "must name exactly one pooling wgllm runs (mean, cls or last token)".into(),
        }),
    }
}

/// The stored number of a pooling (llama.cpp's `llama_pooling_type`).
pub(super) fn pooling_id(p: Pooling) -> u32 {
    match p {
        Pooling::None => 0,
        Pooling::Mean => 1,
        Pooling::Cls => 2,
        Pooling::Last => 3,
    }
}

/// Writes the hyperparameters and the vocabulary.
pub(super) fn metadata(ck: &Checkpoint, w: &mut GgufWriter) -> Result<()> {
    if let Some(kind) = ck
        .config
        .get("position_embedding_type")
        .and_then(Json::as_str)
    {
        if kind != "absolute" {
            return Err(ConvertError::Config {
                key: "position_embedding_type".into(),
                why: format!("is {kind:?}; only absolute positions are supported"),
            });
        }
    }
    let act = ck.config.get("hidden_act").and_then(Json::as_str);
    if !matches!(act, None | Some("gelu")) {
        return Err(ConvertError::Config {
            key: "hidden_act".into(),
            why: format!("is {act:?}; BERT's GELU is the one supported"),
        });
    }
    let u32_of = |key: &str| -> Result<Value> {
        let v = ck.cfg_u64(key)?;
        u32::try_from(v)
            .map(Value::U32)
            .map_err(|_| ConvertError::Config {
                key: key.into(),
                why: format!("{v} is too large"),
            })
    };
    w.add_metadata("bert.context_length", u32_of("max_position_embeddings")?)?;
    w.add_metadata("bert.embedding_length", u32_of("hidden_size")?)?;
    w.add_metadata("bert.feed_forward_length", u32_of("intermediate_size")?)?;
    w.add_metadata("bert.block_count", u32_of("num_hidden_layers")?)?;
    w.add_metadata("bert.attention.head_count", u32_of("num_attention_heads")?)?;
    w.add_metadata(
        "bert.attention.layer_norm_epsilon",
        Value::F32(ck.cfg_f32("layer_norm_eps")?),
    )?;
    w.add_metadata("bert.attention.causal", Value::Bool(false))?;
    w.add_metadata("bert.pooling_type", Value::U32(pooling_id(pooling(ck)?)))?;
    vocab(ck, w)
}

/// The WordPiece vocabulary of `tokenizer.json`, in llama.cpp's spelling, with its special ids.
fn vocab(ck: &Checkpoint, w: &mut GgufWriter) -> Result<()> {
    let tok = read_json(ck.dir(), "tokenizer.json")?;
    let model = tok
        .get("model")
        .ok_or_else(|| ConvertError::Tokenizer("no `model`".into()))?;
    if model.get("type").and_then(Json::as_str) != Some("WordPiece") {
        return Err(ConvertError::Tokenizer(format!(
            "the model is {}, not WordPiece",
            model.get("type").unwrap_or(&Json::Null)
        )));
    }
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| ConvertError::Tokenizer("`model.vocab` is not an object".into()))?;
    let n_rows = ck.cfg_u64("vocab_size")? as usize;
    let n = vocab.len().max(n_rows);
    let mut tokens: Vec<Option<String>> = vec![None; n];
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .filter(|&i| (i as usize) < n)
            .ok_or_else(|| ConvertError::Tokenizer(format!("token {text:?} has id {id}")))?;
        tokens[id as usize] = Some(text.clone());
    }
    let mut types = vec![NORMAL; n];
    let mut special = std::collections::HashMap::new();
    for t in tok
        .get("added_tokens")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(id), Some(text)) = (
            t.get("id").and_then(Json::as_u64),
            t.get("content").and_then(Json::as_str),
        ) else {
            continue;
        };
        let id = id as usize;
        if id < n && t.get("special").and_then(Json::as_bool) == Some(true) {
            types[id] = CONTROL;
            special.insert(text.to_string(), id as u32);
        }
    }
    // BERT's own special tokens are control tokens even where `added_tokens` omits them.
    for (i, t) in tokens.iter().enumerate() {
        if let Some(t) = t.as_deref().filter(|t| BERT_SPECIAL.contains(t)) {
            types[i] = CONTROL;
            special.entry(t.to_string()).or_insert(i as u32);
        }
    }
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| match t {
            Some(t) => gguf_piece(&t, types[i] == CONTROL),
            None => format!("[PAD{i}]"),
        })
        .collect();
    for t in ["[CLS]", "[SEP]", "[UNK]"] {
        if !special.contains_key(t) {
            return Err(ConvertError::Tokenizer(format!(
                "the vocabulary has no {t}"
            )));
        }
    }
    w.add_metadata("tokenizer.ggml.model", Value::String("bert".into()))?;
    w.add_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))?;
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))?;
    w.add_metadata(
        "tokenizer.ggml.token_type_count",
        Value::U32(ck.cfg_u64("type_vocab_size").unwrap_or(2) as u32),
    )?;
    // llama.cpp's keys: [CLS] is BOS, [SEP] both EOS and the separator (its spelling).
    for (text, key) in [
        ("[CLS]", "tokenizer.ggml.bos_token_id"),
        ("[SEP]", "tokenizer.ggml.eos_token_id"),
        ("[UNK]", "tokenizer.ggml.unknown_token_id"),
        ("[SEP]", "tokenizer.ggml.seperator_token_id"),
        ("[PAD]", "tokenizer.ggml.padding_token_id"),
        ("[MASK]", "tokenizer.ggml.mask_token_id"),
    ] {
        if let Some(&id) = special.get(text) {
            w.add_metadata(key, Value::U32(id))?;
        }
    }
    w.add_metadata("tokenizer.ggml.add_bos_token", Value::Bool(true))?;
    w.add_metadata("tokenizer.ggml.add_eos_token", Value::Bool(true))?;
    // Written only where tokenizer.json states them (absent: lower case, accents stripped).
    let norm = tok.get("normalizer");
    for (field, key) in [
        ("lowercase", "tokenizer.ggml.normalizer.lowercase"),
        ("strip_accents", "tokenizer.ggml.normalizer.strip_accents"),
    ] {
        if let Some(v) = norm.and_then(|n| n.get(field)).and_then(Json::as_bool) {
            w.add_metadata(key, Value::Bool(v))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(hf: &str) -> String {
        match tensor_name(hf).unwrap() {
            Mapped::Keep(n) => n,
            Mapped::Skip => panic!("{hf} skipped"),
        }
    }

    #[test]
    fn names_map_as_llama_cpp_maps_them() {
        assert_eq!(
            keep("embeddings.word_embeddings.weight"),
            "token_embd.weight"
        );
        assert_eq!(
            keep("bert.embeddings.LayerNorm.bias"),
            "token_embd_norm.bias"
        );
        assert_eq!(
            keep("encoder.layer.5.attention.self.value.weight"),
            "blk.5.attn_v.weight"
        );
        assert_eq!(
            keep("encoder.layer.0.output.LayerNorm.weight"),
            "blk.0.layer_output_norm.weight"
        );
        assert_eq!(
            keep("encoder.layer.11.intermediate.dense.bias"),
            "blk.11.ffn_up.bias"
        );
        assert!(matches!(
            tensor_name("embeddings.position_ids").unwrap(),
            Mapped::Skip
        ));
        assert!(matches!(
            tensor_name("pooler.dense.weight").unwrap(),
            Mapped::Skip
        ));
        let e = tensor_name("encoder.layer.0.crossattention.weight").unwrap_err();
        assert!(e.to_string().contains("crossattention"), "{e}");
    }
}
