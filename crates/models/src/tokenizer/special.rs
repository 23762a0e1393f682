//! Cutting special tokens out of the input before the model's algorithm runs, after llama.cpp's
//! `tokenizer_st_partition` (`src/llama-vocab.cpp`).
//!
//! Control, user-defined and unknown tokens are taken longest text first; every occurrence of
//! one in the text that is still raw becomes that token, so no merge can ever cross it. With
//! `parse_special` off, control and unknown tokens are left in the text (a user's `<|im_start|>`
//! is then tokenized as plain text) while user-defined ones are still matched, as in llama.cpp
//! and the Hugging Face tokenizers.

use super::vocab::{TokenType, Vocab};

/// A piece of the input: raw text still to tokenize, or a token matched whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Splits `text` into raw text and special tokens.
pub(crate) fn partition<'a>(
    vocab: &Vocab,
    text: &'a str,
    parse_special: bool,
) -> Vec<Fragment<'a>> {
    let mut frags = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(text)]
    };
    for &id in &vocab.special {
        if !parse_special
            && matches!(
                vocab.token_type(id),
                TokenType::Control | TokenType::Unknown
            )
        {
            continue;
        }
        let needle = vocab.tokens[id as usize].as_str();
        if !frags
            .iter()
            .any(|f| matches!(f, Fragment::Text(t) if t.contains(needle)))
        {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(mut rest) = f else {
                next.push(f);
                continue;
            };
            while let Some(pos) = rest.find(needle) {
                if pos > 0 {
                    next.push(Fragment::Text(&rest[..pos]));
                }
                next.push(Fragment::Token(id));
                rest = &rest[pos + needle.len()..];
            }
            if !rest.is_empty() {
                next.push(Fragment::Text(rest));
            }
        }
        frags = next;
    }
    frags
}
