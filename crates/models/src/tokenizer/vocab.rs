//! The vocabulary and its special tokens, read from GGUF metadata the way llama.cpp's
//! `llama_vocab::impl::load` reads them (`src/llama-vocab.cpp`): per-model defaults first, then
//! whatever the file states, then end-of-generation tokens found by their text.

use std::collections::{BTreeSet, HashMap};

use wgllm_gguf::{Array, GgufFile, Value};

use super::bpe::BpePre;
use super::TokenizerError;

/// The tokenizer families `tokenizer.ggml.model` may name, as a message lists them.
pub(crate) const SUPPORTED_MODELS: &str =
    "llama (SentencePiece), gpt2 (byte-level BPE), bert (WordPiece)";

/// A token's type as `tokenizer.ggml.token_type` stores it (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0, or any value the format does not define.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (`<|im_start|>`, `<eos>`): never produced from text by the model's
    /// merges, rendered as nothing when decoding.
    Control,
    /// 4: a user-defined token, always matched whole in the input and decoded verbatim.
    UserDefined,
    /// 5: a reserved, unused slot.
    Unused,
    /// 6: a byte-fallback token `<0xXX>` of a SentencePiece vocabulary.
    Byte,
}

impl TokenType {
    /// The type stored as `v`.
    pub fn from_stored(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    /// Whether the token is matched whole in the input before the model's own algorithm runs
    /// (llama.cpp's `cache_special_tokens`: control, user-defined and unknown tokens).
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown
        )
    }
}

/// Which algorithm the vocabulary is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModelKind {
    /// `llama`: SentencePiece, score-driven merges with byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE with the named pre-tokenizer.
    Bpe(BpePre),
    /// `bert`: WordPiece; `[CLS]` (BOS) before the text and `[SEP]` after it.
    Wpm,
}

/// Token texts that end generation, from llama.cpp's list in `load` (its "maintain a list of
/// tokens that cause end-of-generation" block); the families of other runtimes' hacks (gpt-oss,
/// Gemma 4, MiniMax) are left out.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// Fill-in-the-middle tokens llama.cpp also treats as end of generation, each found by text when
/// its id key is absent: (key, candidate texts).
const FIM_EOG: &[(&str, &[&str])] = &[
    (
        "tokenizer.ggml.fim_pad_token_id",
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    ),
    (
        "tokenizer.ggml.fim_rep_token_id",
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
    ),
    ("tokenizer.ggml.fim_sep_token_id", &["<|file_sep|>"]),
];

/// Everything the tokenizer knows about its tokens.
#[derive(Clone, Debug)]
pub(crate) struct Vocab {
    pub kind: ModelKind,
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub types: Vec<TokenType>,
    pub ids: HashMap<String, u32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    /// The separator ending a WordPiece sequence (`[SEP]`).
    pub sep: Option<u32>,
    pub eog: BTreeSet<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    /// Control, user-defined and unknown tokens, longest text first (ties by id), as llama.cpp
    /// orders them for `tokenizer_st_partition`.
    pub special: Vec<u32>,
}

fn key_type(key: &str, expected: &'static str, v: &Value) -> TokenizerError {
    TokenizerError::KeyType {
        key: key.to_string(),
        expected,
        found: v.type_description(),
    }
}

/// An optional bool key.
pub(crate) fn opt_bool(file: &GgufFile, key: &str) -> Result<Option<bool>, TokenizerError> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| key_type(key, "a bool", v)),
    }
}

/// An optional array of integers of any width, as i64.
fn opt_int_array(file: &GgufFile, key: &str) -> Result<Option<Vec<i64>>, TokenizerError> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    let err = || key_type(key, "an array of integers", v);
    let a = v.as_array().ok_or_else(err)?;
    (0..a.len())
        .map(|i| a.get(i).and_then(|e| e.to_i64()).ok_or_else(err))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Checks that an optional per-token array covers every token.
fn check_len(key: &'static str, found: usize, expected: usize) -> Result<(), TokenizerError> {
    if found < expected {
        return Err(TokenizerError::ShortArray {
            key,
            found,
            expected,
        });
    }
    Ok(())
}

impl Vocab {
    /// Reads the vocabulary; see the module doc for the order things are decided in.
    pub fn from_gguf(file: &GgufFile) -> Result<Vocab, TokenizerError> {
        let model = file.get_str("tokenizer.ggml.model")?;
        let pre = match file.get("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| key_type("tokenizer.ggml.pre", "a string", v))?,
            ),
        };
        // Per-model defaults (llama.cpp `load`, "determine vocab type").
        let (kind, mut bos, mut eos, mut unk, mut add_bos, mut add_space_prefix) = match model {
            "llama" => (ModelKind::Spm, Some(1), Some(2), Some(0), true, true),
            "gpt2" => {
                let pre = BpePre::from_name(pre.unwrap_or("default"))?;
                (
                    ModelKind::Bpe(pre),
                    Some(11),
                    Some(11),
                    None,
                    pre.adds_bos(),
                    false,
                )
            }
            // [CLS] 101 and [SEP] 102 frame the text (the flags are not read); [UNK] 100.
            "bert" => (ModelKind::Wpm, Some(101), None, Some(100), true, false),
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    found: other.to_string(),
                    supported: SUPPORTED_MODELS,
                })
            }
        };
        let mut add_eos = false;
        if let Some(v) = opt_bool(file, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }

        let mut tokens = match file.get_array("tokenizer.ggml.tokens")? {
            Array::String(t) => t.clone(),
            other => {
                return Err(TokenizerError::KeyType {
                    key: "tokenizer.ggml.tokens".into(),
                    expected: "an array of strings",
                    found: format!("array of {}", other.elem_type()),
                })
            }
        };
        let n = tokens.len();
        if n == 0 || u32::try_from(n).is_err() {
            return Err(TokenizerError::VocabSize(n));
        }
        let mut scores = match file.get("tokenizer.ggml.scores") {
            None => vec![0.0; n],
            Some(Value::Array(Array::F32(s))) => s.clone(),
            Some(Value::Array(Array::I32(s))) => s.iter().map(|&v| v as f32).collect(),
            Some(v) => {
                return Err(key_type(
                    "tokenizer.ggml.scores",
                    "an array of f32 or i32",
                    v,
                ))
            }
        };
        check_len("tokenizer.ggml.scores", scores.len(), n)?;
        scores.truncate(n);
        let mut types = match opt_int_array(file, "tokenizer.ggml.token_type")? {
            None => vec![TokenType::Normal; n],
            Some(t) => t.into_iter().map(TokenType::from_stored).collect(),
        };
        check_len("tokenizer.ggml.token_type", types.len(), n)?;
        types.truncate(n);

        let mut ids = HashMap::with_capacity(n);
        for (i, text) in tokens.iter_mut().enumerate() {
            if text.is_empty() {
                // llama.cpp renames empty tokens so they can neither match nor collide.
                *text = format!("[EMPTY_{i}]");
            }
            if let Some(first) = ids.insert(text.clone(), i as u32) {
                return Err(TokenizerError::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: i as u32,
                });
            }
        }

        // Ids the file states; one outside the vocabulary keeps the default, as in llama.cpp.
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        let stated = |key: &str| -> Result<Option<u32>, TokenizerError> {
            match file.get(key) {
                None => Ok(None),
                Some(v) => v
                    .to_u32()
                    .map(|id| in_range(Some(id)))
                    .ok_or_else(|| key_type(key, "an unsigned integer", v)),
            }
        };
        bos = stated("tokenizer.ggml.bos_token_id")?.or(in_range(bos));
        eos = stated("tokenizer.ggml.eos_token_id")?.or(in_range(eos));
        unk = stated("tokenizer.ggml.unknown_token_id")?.or(in_range(unk));
        let pad = stated("tokenizer.ggml.padding_token_id")?;
        // llama.cpp's spelling of the key.
        let sep = stated("tokenizer.ggml.seperator_token_id")?.or(match kind {
            ModelKind::Wpm => in_range(Some(102)),
            _ => None,
        });
        let eot = stated("tokenizer.ggml.eot_token_id")?;
        let eom = stated("tokenizer.ggml.eom_token_id")?;
        if let Some(v) = opt_bool(file, "tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = opt_bool(file, "tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        for (flag, id, what) in [
            (add_bos, bos, "add_bos_token"),
            (add_eos, eos, "add_eos_token"),
            (kind == ModelKind::Wpm, sep, "seperator_token_id"),
            (kind == ModelKind::Wpm, bos, "bos_token_id"),
        ] {
            if flag && id.is_none() {
                return Err(TokenizerError::MissingSpecial(what));
            }
        }

        // End of generation: the stated ids, fill-in-the-middle tokens, and known texts. A token
        // found by text is forced to control type, as llama.cpp does ("control-looking token").
        let mut eog: BTreeSet<u32> = [eos, eot, eom].into_iter().flatten().collect();
        for (key, texts) in FIM_EOG {
            let id = match stated(key)? {
                Some(id) => Some(id),
                None => {
                    let found = texts.iter().filter_map(|t| ids.get(*t).copied()).min();
                    if let Some(id) = found {
                        types[id as usize] = TokenType::Control;
                    }
                    found
                }
            };
            eog.extend(id);
        }
        for text in EOG_TEXTS {
            if let Some(&id) = ids.get(*text) {
                eog.insert(id);
                types[id as usize] = TokenType::Control;
            }
        }

        let mut special: Vec<u32> = (0..n as u32)
            .filter(|&i| types[i as usize].is_special())
            .collect();
        special.sort_by(|&a, &b| {
            tokens[b as usize]
                .len()
                .cmp(&tokens[a as usize].len())
                .then(a.cmp(&b))
        });

        Ok(Vocab {
            kind,
            tokens,
            scores,
            types,
            ids,
            bos,
            eos,
            unk,
            pad,
            sep,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            special,
        })
    }

    /// The id of the token whose text is exactly `text`.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The type of token `id` (`Undefined` past the end).
    pub fn token_type(&self, id: u32) -> TokenType {
        self.types
            .get(id as usize)
            .copied()
            .unwrap_or(TokenType::Undefined)
    }
}
