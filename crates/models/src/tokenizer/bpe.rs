//! Byte-level BPE (`tokenizer.ggml.model = gpt2`), built on the Hugging Face `tokenizers` crate.
//!
//! The text is split by the regular expressions llama.cpp lists for the pre-tokenizer that
//! `tokenizer.ggml.pre` names (`llm_tokenizer_bpe` in `src/llama-vocab.cpp`, each applied in turn
//! to every piece the previous one left, keeping unmatched text as pieces of its own: the
//! `tokenizers` `Split` pre-tokenizer with `Isolated` behaviour), each piece's bytes are mapped to
//! GPT-2's printable alphabet (`ByteLevel` without its own regex), and `tokenizers`' BPE model
//! applies the merges lowest rank first, as llama.cpp's `llm_tokenizer_bpe_session` does.
//! Special tokens never reach this code: `super::special` cuts them out first.
//!
//! The `tokenizers` crate is built with `fancy-regex` (pure Rust, so it also compiles to wasm);
//! it supports everything these patterns use (`\p{L}`, `\p{N}`, the `(?!\S)` look-ahead).

use std::collections::HashMap;
use std::sync::OnceLock;

use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use super::TokenizerError;

/// The pre-tokenizers `tokenizer.ggml.pre` may name, as a message lists them.
pub(crate) const SUPPORTED_PRE: &str =
    "default, gpt-2 (or gpt2), smollm, llama3 (llama-bpe, llama-v3, falcon3, falcon-h1, pixtral, \
     midm-2.0, lfm2), qwen2 (deepseek-r1-qwen, kormo, f2llmv2)";

/// GPT-2's word pattern (llama.cpp `LLAMA_VOCAB_PRE_TYPE_GPT2`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's pattern as llama.cpp adapts it (case-insensitive contractions spelled out).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's pattern: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A byte-level BPE pre-tokenizer, with the settings llama.cpp ties to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BpePre {
    /// `default` (or no `tokenizer.ggml.pre`): punctuation runs, GPT-2 words, numbers, then
    /// groups of three digits.
    Default,
    /// `gpt-2`: GPT-2's pattern alone.
    Gpt2,
    /// `smollm`: every digit alone, then GPT-2's pattern; no space clean-up when decoding.
    Smollm,
    /// `llama3`: Llama 3's pattern; a word that is a token is kept whole without merging, and
    /// BOS is added by default.
    Llama3,
    /// `qwen2`: Qwen 2's pattern; no space clean-up when decoding.
    Qwen2,
}

impl BpePre {
    /// The pre-tokenizer `tokenizer.ggml.pre` names.
    pub fn from_name(name: &str) -> Result<BpePre, TokenizerError> {
        Ok(match name {
            "default" => BpePre::Default,
            "gpt-2" | "gpt2" => BpePre::Gpt2,
            "smollm" => BpePre::Smollm,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => BpePre::Llama3,
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => BpePre::Qwen2,
            other => {
                return Err(TokenizerError::UnsupportedPre {
                    found: other.to_string(),
                    supported: SUPPORTED_PRE,
                })
            }
        })
    }

    /// The split patterns, applied in order (llama.cpp's `regex_exprs`).
    pub fn patterns(self) -> &'static [&'static str] {
        match self {
            BpePre::Default => &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
            BpePre::Gpt2 => &[GPT2],
            BpePre::Smollm => &[r"\p{N}", GPT2],
            BpePre::Llama3 => &[LLAMA3],
            BpePre::Qwen2 => &[QWEN2],
        }
    }

    /// Whether a pre-tokenized word that is itself a token skips the merges (`ignore_merges`).
    pub fn ignores_merges(self) -> bool {
        self == BpePre::Llama3
    }

    /// Whether BOS is added when the file does not say (`add_bos` default).
    pub fn adds_bos(self) -> bool {
        self == BpePre::Llama3
    }

    /// Whether decoding removes spaces before punctuation (`clean_spaces`).
    pub fn cleans_spaces(self) -> bool {
        !matches!(self, BpePre::Smollm | BpePre::Qwen2)
    }
}

/// The BPE model and its pre-tokenizer.
#[derive(Clone, Debug)]
pub(crate) struct ByteLevelBpe {
    hf: tokenizers::Tokenizer,
}

/// Splits a `tokenizer.ggml.merges` entry at the first space after its first byte, as llama.cpp
/// does (so a merge of a space token, `"  x"`, keeps it).
fn split_merge(merge: &str) -> Option<(String, String)> {
    let pos = merge.bytes().skip(1).position(|b| b == b' ')? + 1;
    Some((merge[..pos].to_string(), merge[pos + 1..].to_string()))
}

impl ByteLevelBpe {
    /// Builds the model from the vocabulary (every token, special ones included, as llama.cpp's
    /// `text_to_token` sees them) and the merges, in rank order.
    pub fn new(
        ids: &HashMap<String, u32>,
        merges: &[String],
        pre: BpePre,
    ) -> Result<Self, TokenizerError> {
        let merges = merges
            .iter()
            .enumerate()
            .map(|(index, m)| {
                split_merge(m).ok_or_else(|| TokenizerError::BadMerge {
                    index,
                    merge: m.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let model = BPE::builder()
            .vocab_and_merges(
                ids.iter()
                    .map(|(t, &i)| (t.clone(), i))
                    .collect::<BpeVocab>(),
                merges,
            )
            .ignore_merges(pre.ignores_merges())
            .build()
            .map_err(|e| TokenizerError::Bpe(e.to_string()))?;
        let mut steps = Vec::new();
        for pattern in pre.patterns() {
            let split = Split::new(
                SplitPattern::Regex((*pattern).to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Regex {
                pattern,
                message: e.to_string(),
            })?;
            steps.push(PreTokenizerWrapper::Split(split));
        }
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, false, false,
        )));
        let mut hf = tokenizers::Tokenizer::new(model);
        hf.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(Sequence::new(steps))));
        Ok(ByteLevelBpe { hf })
    }

    /// Appends the ids of `text`, which holds no special tokens.
    pub fn tokenize(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        super::hf_encode(&self.hf, text, out)
    }
}

/// GPT-2's `bytes_to_unicode` (openai/gpt-2 `src/encoder.py`): printable Latin-1 bytes stand for
/// themselves, the other 68 bytes for U+0100 onwards, in byte order.
fn byte_chars() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for (b, slot) in table.iter_mut().enumerate() {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let code = if printable {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            *slot = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
        }
        table
    })
}

/// `bytes` as a byte-level token's text (each byte as its character of GPT-2's alphabet).
pub fn encode_byte_level(bytes: &[u8]) -> String {
    let table = byte_chars();
    bytes.iter().map(|&b| table[usize::from(b)]).collect()
}

/// The bytes a byte-level token's text stands for (llama.cpp `llama_decode_text`). A character
/// outside GPT-2's alphabet stands for its own UTF-8 (llama.cpp writes `[UNK_BYTE_0x…]` there).
pub fn decode_byte_level(text: &str) -> Vec<u8> {
    static INVERSE: OnceLock<HashMap<char, u8>> = OnceLock::new();
    let inverse = INVERSE.get_or_init(|| {
        byte_chars()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect()
    });
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match inverse.get(&c) {
            Some(&b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_matches_gpt2() {
        let t = byte_chars();
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[0xAD], '\u{143}');
        assert_eq!(decode_byte_level("ĠhiĊ"), b" hi\n");
        let all: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(all.len(), 256);
    }

    #[test]
    fn merges_split_after_the_first_byte() {
        assert_eq!(split_merge("Ġ t"), Some(("Ġ".into(), "t".into())));
        assert_eq!(split_merge("ab"), None);
        assert_eq!(split_merge(""), None);
    }

    #[test]
    fn every_pattern_compiles() {
        for pre in [
            BpePre::Default,
            BpePre::Gpt2,
            BpePre::Smollm,
            BpePre::Llama3,
            BpePre::Qwen2,
        ] {
            for p in pre.patterns() {
                Split::new(
                    SplitPattern::Regex(p.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{p}: {e}"));
            }
        }
    }
}
