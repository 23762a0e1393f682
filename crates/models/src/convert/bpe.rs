//! A byte-level BPE `tokenizer.json` (GPT-2's family: Llama 3, Qwen, SmolLM) as llama.cpp's
//! converter writes it: `tokenizer.ggml.model = gpt2`, every token by id with its type (added
//! special tokens control, other added tokens user-defined), the merges in rank order, the
//! pre-tokenizer named by the split pattern the file uses, the special ids (`config.json`'s
//! `*_token_id` where it states one number, else `tokenizer_config.json`'s token texts), the
//! add flags, and the chat template.

use serde_json::Value as Json;
use wgllm_gguf::{Array, GgufWriter, Value};

use super::{read_json, Checkpoint, ConvertError, Result};

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// Llama 3's split pattern as Hugging Face spells it.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's: Llama 3's with single digits.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn bad(why: impl Into<String>) -> ConvertError {
    ConvertError::Tokenizer(why.into())
}

/// Every `Split` regex and whether a `Digits` (one by one) or a regex-splitting `ByteLevel`
/// step is among the pre-tokenizer's steps.
fn pre_steps(pre: &Json, regexes: &mut Vec<String>, digits: &mut bool, byte_regex: &mut bool) {
    match pre.get("type").and_then(Json::as_str) {
        Some("Sequence") => {
            for p in pre
                .get("pretokenizers")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                pre_steps(p, regexes, digits, byte_regex);
            }
        }
        Some("Split") => {
            if let Some(r) = pre
                .get("pattern")
                .and_then(|p| p.get("Regex"))
                .and_then(Json::as_str)
            {
                regexes.push(r.to_string());
            }
        }
        Some("Digits") => {
            *digits |= pre.get("individual_digits").and_then(Json::as_bool) == Some(true);
        }
        Some("ByteLevel") => {
            *byte_regex |= pre.get("use_regex").and_then(Json::as_bool) != Some(false);
        }
        _ => {}
    }
}

/// The `tokenizer.ggml.pre` name of the file's pre-tokenizer (llama.cpp's names, as
/// `tokenizer::BpePre` reads them).
fn pre_name(tok: &Json) -> Result<&'static str> {
    let pre = tok
        .get("pre_tokenizer")
        .ok_or_else(|| bad("no `pre_tokenizer`"))?;
    let (mut regexes, mut digits, mut byte_regex) = (Vec::new(), false, false);
    pre_steps(pre, &mut regexes, &mut digits, &mut byte_regex);
    match (regexes.as_slice(), digits, byte_regex) {
        ([r], false, false) if r == LLAMA3 => Ok("llama-bpe"),
        ([r], false, false) if r == QWEN2 => Ok("qwen2"),
        ([], true, true) => Ok("smollm"),
        ([], false, true) => Ok("gpt-2"),
        _ => Err(bad(format!(
            "a pre-tokenizer wgllm does not know (split patterns {regexes:?}, digits one by \
             one: {digits}); known: Llama 3, Qwen 2, SmolLM, GPT-2"
        ))),
    }
}

/// A special token's id: `config.json`'s `{what}_token_id`, else `tokenizer_config.json`'s
/// `{what}_token` looked up in the vocabulary.
fn special_id(ck: &Checkpoint, tc: &Json, tokens: &[String], what: &str) -> Option<u32> {
    if let Some(id) = ck
        .config
        .get(format!("{what}_token_id"))
        .and_then(Json::as_u64)
    {
        return Some(id as u32);
    }
    let t = tc.get(format!("{what}_token"))?;
    let text = t
        .as_str()
        .or_else(|| t.get("content").and_then(Json::as_str))?;
    tokens.iter().position(|x| x == text).map(|i| i as u32)
}

/// The special tokens the post-processor's single-sequence template (`TemplateProcessing`)
/// puts first and last, if it has one: `None` for a side it leaves bare.
fn template_specials(tok: &Json) -> (Option<&str>, Option<&str>) {
    let Some(single) = tok
        .get("post_processor")
        .and_then(|p| p.get("single"))
        .and_then(Json::as_array)
    else {
        return (None, None);
    };
    (special_in(single.first()), special_in(single.last()))
}

/// The token a template element names, when it is a `SpecialToken`.
fn special_in(e: Option<&Json>) -> Option<&str> {
    e?.get("SpecialToken")?.get("id")?.as_str()
}

/// Writes the vocabulary of `tokenizer.json` (and `tokenizer_config.json` when present).
pub(super) fn vocab(ck: &Checkpoint, w: &mut GgufWriter) -> Result<()> {
    let tok = read_json(ck.dir(), "tokenizer.json")?;
    let model = tok.get("model").ok_or_else(|| bad("no `model`"))?;
    if model.get("type").and_then(Json::as_str) != Some("BPE") {
        return Err(bad("the model is not BPE"));
    }
    if model.get("byte_fallback").and_then(Json::as_bool) == Some(true) {
        return Err(bad(
            "a SentencePiece-style BPE (byte_fallback: Llama 2, Mistral) is not converted yet",
        ));
    }
    let pre = pre_name(&tok)?;
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| bad("`model.vocab` is not an object"))?;
    let added: Vec<(u64, String, bool)> = tok
        .get("added_tokens")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some((
                t.get("id")?.as_u64()?,
                t.get("content")?.as_str()?.to_string(),
                t.get("special").and_then(Json::as_bool) == Some(true),
            ))
        })
        .collect();
    let n_rows = ck
        .config
        .get("vocab_size")
        .and_then(Json::as_u64)
        .unwrap_or(0) as usize;
    let most = vocab
        .values()
        .filter_map(Json::as_u64)
        .chain(added.iter().map(|a| a.0))
        .max()
        .map_or(0, |m| m as usize + 1);
    let n = most.max(n_rows);
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut types = vec![NORMAL; n];
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| bad(format!("token {text:?} has id {id}")))?;
        tokens[id as usize] = Some(text.clone());
    }
    for (id, text, special) in &added {
        tokens[*id as usize] = Some(text.clone());
        types[*id as usize] = if *special { CONTROL } else { USER_DEFINED };
    }
    // Rows past the vocabulary (a padded embedding) get placeholders, as llama.cpp writes.
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
        .collect();
    let merges: Vec<String> = model
        .get("merges")
        .and_then(Json::as_array)
        .ok_or_else(|| bad("`model.merges` is not an array"))?
        .iter()
        .map(|m| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(p) if p.len() == 2 => match (p[0].as_str(), p[1].as_str()) {
                (Some(a), Some(b)) => Ok(format!("{a} {b}")),
                _ => Err(bad(format!("merge {m} is not two strings"))),
            },
            other => Err(bad(format!("merge {other} is neither \"a b\" nor [a, b]"))),
        })
        .collect::<Result<_>>()?;
    let tc = read_json(ck.dir(), "tokenizer_config.json").unwrap_or(Json::Null);
    let bos = special_id(ck, &tc, &tokens, "bos");
    let eos = special_id(ck, &tc, &tokens, "eos");
    let pad = special_id(ck, &tc, &tokens, "pad");
    let texts = tokens.clone();
    let tokens_at = |id: u32| texts.get(id as usize).map(String::as_str);
    w.add_metadata("tokenizer.ggml.model", Value::String("gpt2".into()))?;
    w.add_metadata("tokenizer.ggml.pre", Value::String(pre.into()))?;
    w.add_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))?;
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))?;
    w.add_metadata("tokenizer.ggml.merges", Value::Array(Array::String(merges)))?;
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", bos),
        ("tokenizer.ggml.eos_token_id", eos),
        ("tokenizer.ggml.padding_token_id", pad),
    ] {
        if let Some(id) = id {
            w.add_metadata(key, Value::U32(id))?;
        }
    }
    let (tmpl_bos, tmpl_eos) = template_specials(&tok);
    for (flag, from_template, id) in [
        ("add_bos_token", tmpl_bos, bos),
        ("add_eos_token", tmpl_eos, eos),
    ] {
        // tokenizer_config.json's flag, else whether the post-processor's template frames the
        // text with that token (Qwen3-Embedding appends its EOS this way).
        let add = tc
            .get(flag)
            .and_then(Json::as_bool)
            .or_else(|| from_template.map(|t| id.is_some_and(|i| tokens_at(i) == Some(t))));
        if let Some(add) = add {
            w.add_metadata(format!("tokenizer.ggml.{flag}"), Value::Bool(add))?;
        }
    }
    if let Some(t) = tc.get("chat_template").and_then(Json::as_str) {
        w.add_metadata("tokenizer.chat_template", Value::String(t.into()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pre_tokenizers_are_named_by_their_split_pattern() {
        let split = |r: &str| {
            json!({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated"},
            {"type": "ByteLevel", "use_regex": false}]}})
        };
        assert_eq!(pre_name(&split(LLAMA3)).unwrap(), "llama-bpe");
        assert_eq!(pre_name(&split(QWEN2)).unwrap(), "qwen2");
        let smollm = json!({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, {"type": "ByteLevel", "use_regex": true}]}});
        assert_eq!(pre_name(&smollm).unwrap(), "smollm");
        let gpt2 = json!({"pre_tokenizer": {"type": "ByteLevel"}});
        assert_eq!(pre_name(&gpt2).unwrap(), "gpt-2");
        let e = pre_name(&split(r"\w+")).unwrap_err().to_string();
        assert!(e.contains("does not know"), "{e}");
    }
}
