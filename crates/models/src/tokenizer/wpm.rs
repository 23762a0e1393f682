//! WordPiece (`tokenizer.ggml.model = bert`): BERT's tokenizer, built on the Hugging Face
//! `tokenizers` crate as BERT checkpoints configure it in their `tokenizer.json`
//! (`BertNormalizer`: control characters dropped, CJK characters split, lower case and accents
//! stripped unless `tokenizer.ggml.normalizer.lowercase` / `strip_accents` say otherwise;
//! `BertPreTokenizer`: whitespace and punctuation; `WordPiece`: the longest vocabulary match
//! first, `##` marking a piece inside a word, `[UNK]` for a word of no pieces).
//!
//! GGUF stores the vocabulary as llama.cpp's converter rewrites it ("phantom space"): a
//! word-initial piece gains a leading `▁`, a `##` continuation loses its prefix, control tokens
//! stay as they are (older converters kept every `[X]` token as it is). [`hf_piece`] undoes
//! that, so the pieces match `tokenizers`' own. Special tokens written in the text are cut out
//! first (`super::special`) when parsed; unparsed, their text is split as words.

// `tokenizers` names its token → id map only under `bpe`; WordPiece takes the same type.
use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;

use super::{TokenType, TokenizerError};

/// The longest word WordPiece splits; a longer one is `[UNK]` (BERT's default).
const MAX_WORD_CHARS: usize = 100;

/// How text is normalized before it is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Normalize {
    pub lowercase: bool,
    /// `None`: as `lowercase` (Hugging Face's `BertNormalizer` default).
    pub strip_accents: Option<bool>,
}

/// A WordPiece model with BERT's normalizer and pre-tokenizer.
#[derive(Clone, Debug)]
pub(crate) struct Wpm {
    hf: tokenizers::Tokenizer,
}

/// The text `tokenizers` spells GGUF token `text` (of type `ty`) with: `▁word` → `word`, a
/// special or `[X]` token as it is, any other piece → `##piece` (the inverse of llama.cpp's
/// `phantom` rewrite).
pub(crate) fn hf_piece(text: &str, ty: TokenType) -> String {
    if let Some(word) = text.strip_prefix('\u{2581}') {
        word.to_string()
    } else if ty.is_special() || (text.starts_with('[') && text.ends_with(']')) {
        text.to_string()
    } else {
        format!("##{text}")
    }
}

/// The GGUF spelling of a `tokenizers` WordPiece token (llama.cpp's `phantom`); `control`
/// tokens keep theirs.
pub fn gguf_piece(text: &str, control: bool) -> String {
    if control {
        text.to_string()
    } else if let Some(piece) = text.strip_prefix("##") {
        piece.to_string()
    } else {
        format!("\u{2581}{text}")
    }
}

impl Wpm {
    /// Builds the model over the vocabulary's tokens and types; `unk` is the unknown token's
    /// text.
    pub fn new(
        tokens: &[String],
        types: &[TokenType],
        unk: &str,
        norm: Normalize,
    ) -> Result<Wpm, TokenizerError> {
        let ty = |i: usize| types.get(i).copied().unwrap_or(TokenType::Normal);
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (hf_piece(t, ty(i)), i as u32))
            .collect();
        let unk_ty = tokens
            .iter()
            .position(|t| t == unk)
            .map_or(TokenType::Unknown, ty);
        let model = WordPiece::builder()
            .vocab(vocab)
            .unk_token(hf_piece(unk, unk_ty))
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(MAX_WORD_CHARS)
            .build()
            .map_err(|e| TokenizerError::Bpe(e.to_string()))?;
        let mut hf = tokenizers::Tokenizer::new(model);
        hf.with_normalizer(Some(BertNormalizer::new(
            true,
            true,
            norm.strip_accents,
            norm.lowercase,
        )));
        hf.with_pre_tokenizer(Some(BertPreTokenizer));
        Ok(Wpm { hf })
    }

    /// Appends the ids of `text`, which holds no special tokens.
    pub fn tokenize(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        super::hf_encode(&self.hf, text, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNCASED: Normalize = Normalize {
        lowercase: true,
        strip_accents: None,
    };

    #[test]
    fn phantom_spelling_round_trips() {
        for t in ["hello", "##ing", "#", "###", "a", "[unused0]"] {
            let normal = hf_piece(&gguf_piece(t, false), TokenType::Normal);
            assert_eq!(normal, t, "{t}");
        }
        assert_eq!(gguf_piece("[CLS]", true), "[CLS]");
        assert_eq!(hf_piece("[CLS]", TokenType::Control), "[CLS]");
        assert_eq!(gguf_piece("hello", false), "\u{2581}hello");
        assert_eq!(gguf_piece("##ing", false), "ing");
        // An older converter's spelling of a normal `[X]` token reads the same.
        assert_eq!(hf_piece("[unused0]", TokenType::Normal), "[unused0]");
    }

    fn tiny(norm: Normalize) -> Wpm {
        let tokens: Vec<String> = [
            "[UNK]", "▁un", "aff", "able", "▁the", "▁,", "▁cafe", "▁café", "▁The",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut types = vec![TokenType::Normal; tokens.len()];
        types[0] = TokenType::Control;
        Wpm::new(&tokens, &types, "[UNK]", norm).unwrap()
    }

    #[test]
    fn words_split_into_the_longest_pieces() {
        let mut ids = Vec::new();
        tiny(UNCASED)
            .tokenize("The unaffable, CAFÉ xyz", &mut ids)
            .unwrap();
        assert_eq!(ids, vec![4, 1, 2, 3, 5, 6, 0]);
    }

    #[test]
    fn a_cased_vocabulary_keeps_case_and_accents() {
        let cased = Normalize {
            lowercase: false,
            strip_accents: None,
        };
        let mut ids = Vec::new();
        tiny(cased).tokenize("The café", &mut ids).unwrap();
        assert_eq!(ids, vec![8, 7]);
    }
}
