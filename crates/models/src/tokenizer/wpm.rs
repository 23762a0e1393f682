//! WordPiece (`tokenizer.ggml.model = bert`): BERT's tokenizer, built on the Hugging Face
//! `tokenizers` crate as the uncased BERT checkpoints configure it in their `tokenizer.json`
//! (`BertNormalizer`: control characters dropped, CJK characters split, lower case, accents
//! stripped; `BertPreTokenizer`: whitespace and punctuation; `WordPiece`: the longest vocabulary
//! match first, `##` marking a piece inside a word, `[UNK]` for a word of no pieces).
//!
//! GGUF stores the vocabulary as llama.cpp's converter rewrites it ("phantom space"): a
//! word-initial piece gains a leading `▁`, a `##` continuation loses its prefix, and `[X]`
//! tokens stay as they are. [`hf_vocab`] undoes that, so the pieces match `tokenizers`' own.
//! Special tokens never reach this code: `super::special` cuts them out first.

// `tokenizers` names its token → id map only under `bpe`; WordPiece takes the same type.
use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;

use super::TokenizerError;

/// The longest word WordPiece splits; a longer one is `[UNK]` (BERT's default).
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece model with BERT's normalizer and pre-tokenizer.
#[derive(Clone, Debug)]
pub(crate) struct Wpm {
    hf: tokenizers::Tokenizer,
}

/// The text `tokenizers` spells GGUF token `text` with: `▁word` → `word`, `[X]` → `[X]`, any
/// other piece → `##piece` (the inverse of llama.cpp's `phantom` rewrite).
pub(crate) fn hf_piece(text: &str) -> String {
    if let Some(word) = text.strip_prefix('\u{2581}') {
        word.to_string()
    } else if text.starts_with('[') && text.ends_with(']') {
        text.to_string()
    } else {
        format!("##{text}")
    }
}

/// The GGUF spelling of a `tokenizers` WordPiece token (llama.cpp's `phantom`).
pub fn gguf_piece(text: &str) -> String {
    if text.starts_with('[') && text.ends_with(']') {
        text.to_string()
    } else if let Some(piece) = text.strip_prefix("##") {
        piece.to_string()
    } else {
        format!("\u{2581}{text}")
    }
}

/// The vocabulary as `tokenizers` spells it.
fn hf_vocab(tokens: &[String]) -> Vocab {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (hf_piece(t), i as u32))
        .collect()
}

impl Wpm {
    /// Builds the model over the vocabulary's tokens; `unk` is the unknown token's text.
    pub fn new(tokens: &[String], unk: &str) -> Result<Wpm, TokenizerError> {
        let model = WordPiece::builder()
            .vocab(hf_vocab(tokens))
            .unk_token(hf_piece(unk))
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(MAX_WORD_CHARS)
            .build()
            .map_err(|e| TokenizerError::Bpe(e.to_string()))?;
        let mut hf = tokenizers::Tokenizer::new(model);
        hf.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
        hf.with_pre_tokenizer(Some(BertPreTokenizer));
        Ok(Wpm { hf })
    }

    /// Appends the ids of `text`, which holds no special tokens.
    pub fn tokenize(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let enc = self
            .hf
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phantom_spelling_round_trips() {
        for t in ["hello", "##ing", "[CLS]", "#", "###", "##", "a"] {
            assert_eq!(hf_piece(&gguf_piece(t)), t, "{t}");
        }
        assert_eq!(gguf_piece("hello"), "\u{2581}hello");
        assert_eq!(gguf_piece("##ing"), "ing");
    }

    #[test]
    fn words_split_into_the_longest_pieces() {
        let tokens: Vec<String> = ["[UNK]", "▁un", "aff", "able", "▁the", "▁,", "▁cafe"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let w = Wpm::new(&tokens, "[UNK]").unwrap();
        let mut ids = Vec::new();
        w.tokenize("The unaffable, CAFÉ xyz", &mut ids).unwrap();
        assert_eq!(ids, vec![4, 1, 2, 3, 5, 6, 0]);
    }
}
