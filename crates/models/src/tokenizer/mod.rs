//! The tokenizer a GGUF file describes in its `tokenizer.*` metadata, behaving like llama.cpp's
//! (`src/llama-vocab.cpp`, `llama-tokenize`), which is the reference for every choice here.
//!
//! ## Design
//! - `vocab`: tokens, scores, types and special ids as llama.cpp's `llama_vocab::load` reads
//!   them, including its per-model defaults and the end-of-generation tokens it finds by text.
//! - `special`: control and user-defined tokens written in the input are matched whole first
//!   (`tokenizer_st_partition`), so no merge ever crosses one.
//! - the model runs on the raw text between them: `spm` (`llama`: SentencePiece-style merges
//!   by score with byte fallback, implemented here because the vocabularies carry scores, not
//!   merges) or `bpe` (`gpt2`: byte-level BPE on the Hugging Face `tokenizers` crate, with the
//!   split patterns of the pre-tokenizer `tokenizer.ggml.pre` names).
//! - decoding maps each token to bytes (`token_to_piece`); [`StreamDecoder`] releases them as
//!   whole UTF-8 characters; `chat` renders `tokenizer.chat_template` with `minijinja`.
//!
//! ## Adding a model family
//! Name it in `vocab::Vocab::from_gguf` (defaults for special ids and flags, as llama.cpp's
//! `load` sets them), give it a variant of `vocab::ModelKind`, and handle that variant in
//! [`Tokenizer::encode_with`] and [`Tokenizer::piece`]; the compiler points at each place.

mod bpe;
mod chat;
mod special;
mod spm;
mod stream;
mod vocab;
mod wpm;

use std::borrow::Cow;

use wgllm_gguf::{GgufError, GgufFile, Value};

pub use bpe::{decode_byte_level, encode_byte_level, BpePre};
pub use chat::ChatMessage;
pub use stream::StreamDecoder;
pub use vocab::TokenType;
pub use wpm::gguf_piece;

use bpe::ByteLevelBpe;
use special::Fragment;
use vocab::{opt_bool, ModelKind, Vocab};
use wpm::Wpm;

/// Why a tokenizer could not be built, or could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Metadata(#[from] GgufError),
    #[error(
        "unsupported tokenizer model '{found}' (tokenizer.ggml.model); supported: {supported}"
    )]
    UnsupportedModel {
        found: String,
        supported: &'static str,
    },
    #[error("unsupported pre-tokenizer '{found}' (tokenizer.ggml.pre); supported: {supported}")]
    UnsupportedPre {
        found: String,
        supported: &'static str,
    },
    #[error("metadata key {key} must be {expected}, found {found}")]
    KeyType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("{key} has {found} entries for {expected} tokens")]
    ShortArray {
        key: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("tokenizer.ggml.tokens holds {0} tokens; a vocabulary needs 1 to 2^32-1")]
    VocabSize(usize),
    #[error("duplicate token {text:?} at ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("tokenizer.ggml.{0}: the model needs this token but has none")]
    MissingSpecial(&'static str),
    #[error(
        "tokenizer.ggml.merges entry {index} ({merge:?}) is not two tokens separated by a space"
    )]
    BadMerge { index: usize, merge: String },
    #[error("building the BPE model: {0}")]
    Bpe(String),
    #[error("pre-tokenizer pattern {pattern:?}: {message}")]
    Regex {
        pattern: &'static str,
        message: String,
    },
    #[error("tokenizing: {0}")]
    Encode(String),
    #[error(
        "the model has no chat template (tokenizer.chat_template) and its vocabulary has neither \
         <|im_start|> (ChatML) nor <start_of_turn> (Gemma) for a built-in one"
    )]
    NoChatTemplate,
    /// The message includes minijinja's (so it is not also a `source`).
    #[error("chat template: {0}")]
    Template(minijinja::Error),
}

impl From<minijinja::Error> for TokenizerError {
    fn from(e: minijinja::Error) -> TokenizerError {
        TokenizerError::Template(e)
    }
}

/// The algorithm that tokenizes raw text.
#[derive(Clone, Debug)]
enum Model {
    Spm,
    Bpe(Box<ByteLevelBpe>),
    Wpm(Box<Wpm>),
}

/// A tokenizer built from GGUF metadata; see the module doc.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    clean_spaces: bool,
    chat_template: Option<String>,
}

/// Appends the ids `tokenizers` gives `text` (no special tokens added: the caller frames them).
fn hf_encode(
    hf: &tokenizers::Tokenizer,
    text: &str,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let enc = hf
        .encode_fast(text, false)
        .map_err(|e| TokenizerError::Encode(e.to_string()))?;
    out.extend_from_slice(enc.get_ids());
    Ok(())
}

/// Replaces `▁` (U+2581), SentencePiece's space, by a space.
fn unescape_spaces(text: &str) -> String {
    text.replace('\u{2581}', " ")
}

/// The byte a `<0xXX>` token stands for.
fn byte_of(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

/// llama.cpp's `clean_spaces` passes over decoded text (from Hugging Face's
/// `clean_up_tokenization`): drop the space before `? ! . ,`, the spaces around a lone `'`, and
/// the space before `'s 'm 're 've`.
fn clean_spaces(t: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(t.len());
    for (i, &x) in t.iter().enumerate() {
        if i > 0 && t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            a.pop();
        }
        a.push(x);
    }
    let mut b = Vec::with_capacity(a.len());
    let mut i = 0;
    while i < a.len() {
        let x = a[i];
        if i > 0 && x == b'\'' && i + 1 < a.len() && a[i - 1] == b' ' && a[i + 1] == b' ' {
            b.pop();
            a[i + 1] = 0;
            i += 1;
        }
        b.push(x);
        i += 1;
    }
    let mut c = Vec::with_capacity(b.len());
    for (i, &x) in b.iter().enumerate() {
        if i > 0 && b[i - 1] == b' ' && x == b'\'' && i + 1 < b.len() {
            let (x1, x2) = (b[i + 1], b.get(i + 2).copied());
            if matches!(x1, b's' | b'm')
                || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')))
            {
                c.pop();
            }
        }
        c.push(x);
    }
    c
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` and `tokenizer.chat_template`.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::from_gguf(file)?;
        let (model, clean_spaces) = match vocab.kind {
            ModelKind::Spm => (Model::Spm, false),
            ModelKind::Bpe(pre) => {
                let merges = match file.get_array("tokenizer.ggml.merges")? {
                    wgllm_gguf::Array::String(m) => m,
                    other => {
                        return Err(TokenizerError::KeyType {
                            key: "tokenizer.ggml.merges".into(),
                            expected: "an array of strings",
                            found: format!("array of {}", other.elem_type()),
                        })
                    }
                };
                (
                    Model::Bpe(Box::new(ByteLevelBpe::new(&vocab.ids, merges, pre)?)),
                    pre.cleans_spaces(),
                )
            }
            ModelKind::Wpm => {
                let unk = vocab
                    .unk
                    .and_then(|id| vocab.tokens.get(id as usize))
                    .ok_or(TokenizerError::MissingSpecial("unknown_token_id"))?;
                let lowercase = opt_bool(file, "tokenizer.ggml.normalizer.lowercase")?;
                let strip = opt_bool(file, "tokenizer.ggml.normalizer.strip_accents")?;
                let norm = wpm::Normalize {
                    lowercase: lowercase.unwrap_or(true),
                    strip_accents: strip,
                };
                let wpm = Wpm::new(&vocab.tokens, &vocab.types, unk, norm)?;
                (Model::Wpm(Box::new(wpm)), false)
            }
        };
        let chat_template = match file.get("tokenizer.chat_template") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                return Err(TokenizerError::KeyType {
                    key: "tokenizer.chat_template".into(),
                    expected: "a string",
                    found: v.type_description(),
                })
            }
        };
        Ok(Tokenizer {
            vocab,
            model,
            clean_spaces,
            chat_template,
        })
    }

    /// Tokenizes `text` as `llama-tokenize` does by default: special tokens written in the text
    /// are recognized, and with `add_special` BOS/EOS are added when the model's metadata says so
    /// (`tokenizer.ggml.add_bos_token`, `add_eos_token`, or llama.cpp's per-model default).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(text, add_special, true)
    }

    /// [`Tokenizer::encode`] with control tokens in the text left as plain text when
    /// `parse_special` is false (user-defined tokens are still matched), as for untrusted input.
    ///
    /// Fails only when the byte-level BPE pre-tokenizer's regex engine gives up on the input.
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let v = &self.vocab;
        let mut out = Vec::new();
        // WordPiece always frames its text [CLS] ... [SEP], whatever the flags say (llama.cpp).
        let wpm = matches!(self.model, Model::Wpm(_));
        if add_special && (v.add_bos || wpm) {
            out.extend(v.bos);
        }
        let fragments = special::partition(v, text, parse_special);
        match &self.model {
            Model::Spm => {
                // A space is prefixed to text at the start and after a special token.
                let mut after_special = true;
                for f in fragments {
                    match f {
                        Fragment::Text(t) => {
                            let prefix = if v.add_space_prefix && after_special {
                                " "
                            } else {
                                ""
                            };
                            let escaped = format!("{prefix}{t}").replace(' ', "\u{2581}");
                            spm::tokenize(v, &escaped, &mut out);
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                    }
                }
            }
            Model::Bpe(bpe) => {
                for f in fragments {
                    match f {
                        Fragment::Text(t) => bpe.tokenize(t, &mut out)?,
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Model::Wpm(wpm) => {
                for f in fragments {
                    match f {
                        Fragment::Text(t) => wpm.tokenize(t, &mut out)?,
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    out.extend(v.sep);
                }
            }
        }
        if add_special && v.add_eos && !wpm {
            out.extend(v.eos);
        }
        Ok(out)
    }

    /// The bytes token `id` decodes to (llama.cpp `token_to_piece` without `special`): control,
    /// unknown and unused tokens give nothing, user-defined ones their text, byte tokens their
    /// byte, normal ones their text with `▁` as space (SentencePiece) or GPT-2's byte alphabet
    /// undone (byte-level BPE). An id outside the vocabulary gives nothing.
    pub fn piece(&self, id: u32) -> Cow<'_, [u8]> {
        let Some(text) = self.vocab.tokens.get(id as usize) else {
            return Cow::Borrowed(&[]);
        };
        match (self.vocab.token_type(id), &self.model) {
            (TokenType::UserDefined, _) => Cow::Borrowed(text.as_bytes()),
            (TokenType::Normal, Model::Spm) => Cow::Owned(unescape_spaces(text).into_bytes()),
            (TokenType::Normal, Model::Bpe(_)) => Cow::Owned(bpe::decode_byte_level(text)),
            (TokenType::Normal, Model::Wpm(_)) => Cow::Owned(unescape_spaces(text).into_bytes()),
            (TokenType::Byte, _) => Cow::Owned(byte_of(text).into_iter().collect()),
            (
                TokenType::Control | TokenType::Unknown | TokenType::Unused | TokenType::Undefined,
                _,
            ) => Cow::Borrowed(&[]),
        }
    }

    /// The text of `ids` (llama.cpp `llama_detokenize` keeping special tokens in the list but not
    /// rendering them): with `add_space_prefix`, the first token's leading space is dropped; for
    /// byte-level pre-tokenizers that ask for it, spaces before punctuation are cleaned up. Bytes
    /// that are not valid UTF-8 come out as U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        let mut strip_space = self.vocab.add_space_prefix || matches!(self.model, Model::Wpm(_));
        for &id in ids {
            let piece = self.piece(id);
            let piece = match (strip_space, piece.first()) {
                (true, Some(b' ')) => &piece[1..],
                _ => &piece[..],
            };
            bytes.extend_from_slice(piece);
            strip_space = false;
        }
        if self.clean_spaces {
            bytes = clean_spaces(&bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A decoder for ids arriving one at a time.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    /// Whether `id` ends generation: EOS, EOT, EOM, and the tokens llama.cpp recognizes by text
    /// (`<|im_end|>`, `<end_of_turn>`, `<|endoftext|>`…).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// Every end-of-generation token, ascending.
    pub fn eog_tokens(&self) -> impl Iterator<Item = u32> + '_ {
        self.vocab.eog.iter().copied()
    }

    /// The beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// The end-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// The padding token.
    pub fn pad(&self) -> Option<u32> {
        self.vocab.pad
    }

    /// The separator a WordPiece sequence ends with (`[SEP]`).
    pub fn sep(&self) -> Option<u32> {
        self.vocab.sep
    }

    /// Whether [`Tokenizer::encode`] with `add_special` starts with BOS.
    pub fn adds_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.tokens.len()
    }

    /// The token's text as the vocabulary spells it (`Ġthe`, `▁the`, `<0x0A>`).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(String::as_str)
    }

    /// The token's type (`Undefined` for an id outside the vocabulary).
    pub fn token_type(&self, id: u32) -> TokenType {
        self.vocab.token_type(id)
    }

    /// The id of the token spelled exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// The file's chat template, if it has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Token ids of a prompt: `text` itself (a completion), or with `chat` the text wrapped in
    /// the chat template as one user message. BOS is added where the model wants it, unless the
    /// template already wrote it.
    pub fn prompt_ids(&self, text: &str, chat: bool) -> Result<Vec<u32>, TokenizerError> {
        match chat {
            true => self.chat_ids(&[ChatMessage::new("user", text)]),
            false => self.encode(text, true),
        }
    }

    /// Token ids of a conversation rendered with the chat template, ending with the text that
    /// opens the assistant's reply. BOS is added where the model wants it, unless the template
    /// already wrote it.
    pub fn chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, TokenizerError> {
        self.chat_ids_with_tools(messages, None)
    }

    /// [`Tokenizer::chat_ids`] with the `tools` (OpenAI's array) given to the template.
    pub fn chat_ids_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
    ) -> Result<Vec<u32>, TokenizerError> {
        let rendered = self.render_chat_with_tools(messages, tools, true)?;
        let has_bos = self
            .bos()
            .and_then(|b| self.token_str(b))
            .is_some_and(|b| rendered.starts_with(b));
        self.encode_with(&rendered, !has_bos, true)
    }

    /// Renders a conversation with the model's chat template; with `add_generation_prompt`, the
    /// text that opens the assistant's reply is appended. A file without a template falls back to
    /// ChatML when its vocabulary has `<|im_start|>`, to Gemma's turns when it has
    /// `<start_of_turn>`, and is an error otherwise.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.render_chat_with_tools(messages, None, add_generation_prompt)
    }

    /// The template [`Tokenizer::render_chat`] uses: the file's, or the fallback it names.
    pub fn effective_chat_template(&self) -> Result<&str, TokenizerError> {
        Ok(match &self.chat_template {
            Some(t) => t.as_str(),
            None if self.vocab.id("<|im_start|>").is_some() => chat::CHATML,
            None if self.vocab.id("<start_of_turn>").is_some() => chat::GEMMA,
            None => return Err(TokenizerError::NoChatTemplate),
        })
    }

    /// [`Tokenizer::render_chat`] with the `tools` (OpenAI's array) given to the template.
    pub fn render_chat_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let source = self.effective_chat_template()?;
        let text = |id: Option<u32>| id.and_then(|i| self.token_str(i)).unwrap_or("");
        Ok(chat::render(
            source,
            messages,
            tools,
            add_generation_prompt,
            text(self.bos()),
            text(self.eos()),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_mirrors_llama_cpp() {
        let c = |s: &str| String::from_utf8(clean_spaces(s.as_bytes())).unwrap();
        assert_eq!(c("Hello , world !"), "Hello, world!");
        assert_eq!(c("a ' b"), "a'b");
        assert_eq!(
            c("it 's they 're we 've I 'm don 't"),
            "it's they're we've I'm don 't"
        );
        assert_eq!(c(""), "");
    }

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(byte_of("<0x0A>"), Some(10));
        assert_eq!(byte_of("<0xff>"), Some(255));
        assert_eq!(byte_of("<0x1>"), None);
        assert_eq!(byte_of("hello"), None);
    }
}
