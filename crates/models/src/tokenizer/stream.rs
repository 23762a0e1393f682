//! Streaming detokenization: ids arrive one at a time during generation, text leaves only as
//! whole UTF-8 characters.
//!
//! A token's piece may end inside a character: a byte-fallback token `<0xF0>` of a SentencePiece
//! vocabulary, or a byte-level BPE token holding the first bytes of an emoji. The decoder keeps
//! such an unfinished tail until the tokens completing it arrive (what llama.cpp's server does
//! with `validate_utf8` before sending a chunk). Bytes that can never start or continue a valid
//! character come out as U+FFFD, so one bad byte never holds back the rest of the stream.

use super::Tokenizer;

/// Turns ids into text incrementally; see the module doc.
#[derive(Clone, Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder with nothing pending.
    pub fn new(tokenizer: &'a Tokenizer) -> StreamDecoder<'a> {
        StreamDecoder {
            tokenizer,
            pending: Vec::new(),
        }
    }

    /// Adds token `id` and returns the text that is now complete (often empty while a
    /// multi-byte character is unfinished). Control tokens add nothing, as in [`Tokenizer::decode`].
    pub fn push(&mut self, id: u32) -> String {
        self.pending.extend_from_slice(&self.tokenizer.piece(id));
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: an unfinished character left over comes out as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
