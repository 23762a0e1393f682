//! A Whisper model: its hyperparameters, vocabulary and mel filters, from a GGUF file of
//! architecture `whisper` or from whisper.cpp's `ggml-*.bin` (read into the same form).
//!
//! The GGUF form (`docs/whisper-gguf.md`): the keys in [`keys`], the mel filter bank as the
//! tensor `mel_filters` (`[n_freq, n_mel]` f32), the vocabulary's regular tokens as byte-level
//! strings (GPT-2's alphabet) in `tokenizer.ggml.tokens`, and the tensors under whisper.cpp's
//! names (`encoder.conv1.weight`, `decoder.blocks.0.cross_attn.query.weight`, ...).

use wgllm_gguf::GgufFile;
use wgllm_models::tokenizer::decode_byte_level;

use crate::error::SpeechError;
use crate::lang::LANGUAGES;
use crate::mel::MelFilters;

/// The GGUF keys of a Whisper model.
pub mod keys {
    pub const ARCH: &str = "general.architecture";
    pub const AUDIO_CTX: &str = "whisper.audio.context_length";
    pub const AUDIO_STATE: &str = "whisper.audio.embedding_length";
    pub const AUDIO_HEAD: &str = "whisper.audio.head_count";
    pub const AUDIO_LAYER: &str = "whisper.audio.block_count";
    pub const TEXT_CTX: &str = "whisper.text.context_length";
    pub const TEXT_STATE: &str = "whisper.text.embedding_length";
    pub const TEXT_HEAD: &str = "whisper.text.head_count";
    pub const TEXT_LAYER: &str = "whisper.text.block_count";
    pub const MELS: &str = "whisper.audio.mel_bins";
    pub const TOKENIZER: &str = "tokenizer.ggml.model";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const MEL_FILTERS: &str = "mel_filters";
}

/// Whisper's hyperparameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhisperConfig {
    pub n_vocab: u64,
    /// Encoder positions: 1500 for 30 s (two mel frames each).
    pub n_audio_ctx: u64,
    pub n_audio_state: u64,
    pub n_audio_head: u64,
    pub n_audio_layer: u32,
    /// Decoder positions: 448.
    pub n_text_ctx: u64,
    pub n_text_state: u64,
    pub n_text_head: u64,
    pub n_text_layer: u32,
    pub n_mels: u64,
}

impl WhisperConfig {
    /// Reads the hyperparameters of `f`, checking they fit together.
    pub fn from_gguf(f: &GgufFile) -> Result<WhisperConfig, SpeechError> {
        let arch = f.architecture()?;
        if arch != "whisper" {
            return Err(SpeechError::NotWhisper(format!(
                "a model of architecture '{arch}'"
            )));
        }
        let u = |k: &str| f.get_u64(k);
        let n_vocab = f
            .tensor("decoder.token_embedding.weight")
            .map(|t| t.shape().get(1).copied().unwrap_or(0))
            .ok_or_else(|| {
                SpeechError::BadModel("no tensor 'decoder.token_embedding.weight'".into())
            })?;
        let c = WhisperConfig {
            n_vocab,
            n_audio_ctx: u(keys::AUDIO_CTX)?,
            n_audio_state: u(keys::AUDIO_STATE)?,
            n_audio_head: u(keys::AUDIO_HEAD)?,
            n_audio_layer: f.get_u32(keys::AUDIO_LAYER)?,
            n_text_ctx: u(keys::TEXT_CTX)?,
            n_text_state: u(keys::TEXT_STATE)?,
            n_text_head: u(keys::TEXT_HEAD)?,
            n_text_layer: f.get_u32(keys::TEXT_LAYER)?,
            n_mels: u(keys::MELS)?,
        };
        let bad = |why: String| Err(SpeechError::BadModel(why));
        if c.n_audio_head == 0 || !c.n_audio_state.is_multiple_of(c.n_audio_head) {
            return bad(format!(
                "{} audio heads do not divide {}",
                c.n_audio_head, c.n_audio_state
            ));
        }
        if c.n_text_head == 0 || !c.n_text_state.is_multiple_of(c.n_text_head) {
            return bad(format!(
                "{} text heads do not divide {}",
                c.n_text_head, c.n_text_state
            ));
        }
        if c.n_audio_state != c.n_text_state {
            return bad(format!(
                "audio width {} differs from text width {} (cross-attention needs them equal)",
                c.n_audio_state, c.n_text_state
            ));
        }
        if c.n_audio_ctx == 0
            || c.n_audio_ctx * 2 > crate::mel::WINDOW_FRAMES as u64
            || c.n_text_ctx < 8
        {
            return bad(format!(
                "audio context {} (at most 1500) or text context {} (at least 8)",
                c.n_audio_ctx, c.n_text_ctx
            ));
        }
        if c.n_vocab < 51_864 {
            return bad(format!(
                "a vocabulary of {} tokens (Whisper's have 51864 or more)",
                c.n_vocab
            ));
        }
        Ok(c)
    }
}

/// Whisper's vocabulary: each token's bytes and the special tokens' ids (whisper.cpp's layout:
/// English-only models have 51864 tokens, multilingual ones 51865 and more, one language token
/// each past the 99 of the first models).
#[derive(Clone, Debug)]
pub struct Vocab {
    pub tokens: Vec<Vec<u8>>,
    pub multilingual: bool,
    pub n_languages: usize,
    pub eot: u32,
    pub sot: u32,
    pub translate: u32,
    pub transcribe: u32,
    pub solm: u32,
    pub prev: u32,
    pub nosp: u32,
    pub not: u32,
    /// `<|0.00|>`: timestamp tokens are `beg + i` for `i · 20 ms`.
    pub beg: u32,
    /// Bytes → id of the regular tokens (for prompts).
    by_bytes: std::collections::HashMap<Vec<u8>, u32>,
}

impl Vocab {
    /// The vocabulary of `f` for a model of `n_vocab` tokens.
    pub fn from_gguf(f: &GgufFile, n_vocab: u64) -> Result<Vocab, SpeechError> {
        let stored = f.get_array(keys::TOKENS)?;
        let mut tokens = Vec::with_capacity(n_vocab as usize);
        for i in 0..stored.len() {
            match stored.get(i) {
                Some(wgllm_gguf::Value::String(s)) => tokens.push(decode_byte_level(&s)),
                _ => return Err(SpeechError::BadModel(format!("token {i} is not a string"))),
            }
        }
        let n = n_vocab as u32;
        let multilingual = n >= 51_865;
        let n_languages = (n - 51_765 - u32::from(multilingual)) as usize;
        // Past the first 99 languages, each language token moves the tokens after it.
        let shift = if multilingual {
            n_languages as u32 - 98
        } else {
            0
        };
        let (eot, sot) = if multilingual {
            (50_257, 50_258)
        } else {
            (50_256, 50_257)
        };
        let mut v = Vocab {
            tokens: Vec::new(),
            multilingual,
            n_languages: n_languages.min(LANGUAGES.len()),
            eot,
            sot,
            translate: 50_357 + shift,
            transcribe: 50_358 + shift,
            solm: 50_359 + shift,
            prev: 50_360 + shift,
            nosp: 50_361 + shift,
            not: 50_362 + shift,
            beg: 50_363 + shift,
            by_bytes: Default::default(),
        };
        // whisper.cpp's names of the tokens its files leave out.
        for i in tokens.len() as u32..n {
            let name = match i {
                i if i > v.beg => format!("[_TT_{}]", i - v.beg),
                i if i == v.eot => "[_EOT_]".into(),
                i if i == v.sot => "[_SOT_]".into(),
                i if i == v.translate => "[_TRANSLATE_]".into(),
                i if i == v.transcribe => "[_TRANSCRIBE_]".into(),
                i if i == v.solm => "[_SOLM_]".into(),
                i if i == v.prev => "[_PREV_]".into(),
                i if i == v.nosp => "[_NOSP_]".into(),
                i if i == v.not => "[_NOT_]".into(),
                i if i == v.beg => "[_BEG_]".into(),
                i if i > v.sot && i <= v.sot + n_languages as u32 => {
                    let l = (i - v.sot - 1) as usize;
                    format!("[_LANG_{}]", LANGUAGES.get(l).map_or("?", |l| l.0))
                }
                i => format!("[_extra_token_{i}]"),
            };
            tokens.push(name.into_bytes());
        }
        for (i, t) in tokens.iter().enumerate().take(v.eot as usize) {
            v.by_bytes.entry(t.clone()).or_insert(i as u32);
        }
        v.tokens = tokens;
        Ok(v)
    }

    /// The token of a single space (suppressed as a window's first token).
    pub fn space(&self) -> Option<&u32> {
        self.by_bytes.get(b" ".as_slice())
    }

    /// The token of language `i`.
    pub fn lang_token(&self, i: usize) -> u32 {
        self.sot + 1 + i as u32
    }

    /// The text of `ids`' regular tokens (special and timestamp tokens are left out).
    pub fn text(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids.iter().filter(|&&id| id < self.eot) {
            bytes.extend_from_slice(&self.tokens[id as usize]);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// `text` as tokens, split into words and each word into its longest known pieces, as
    /// whisper.cpp tokenizes a prompt.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for word in split_words(text.as_bytes()) {
            let mut i = 0;
            while i < word.len() {
                let found = (i + 1..=word.len())
                    .rev()
                    .find_map(|j| self.by_bytes.get(&word[i..j]).map(|&id| (id, j)));
                match found {
                    Some((id, j)) => {
                        out.push(id);
                        i = j;
                    }
                    None => i += 1,
                }
            }
        }
        out
    }
}

/// GPT-2's pre-split as whisper.cpp writes it (`'s|'t|'re|'ve|'m|'ll|'d| ?[[:alpha:]]+|
/// ?[[:digit:]]+| ?[^\s[:alpha:][:digit:]]+|\s+(?!\S)|\s+`, ASCII classes over bytes).
fn split_words(b: &[u8]) -> Vec<&[u8]> {
    #[derive(PartialEq)]
    enum Class {
        Alpha,
        Digit,
        Space,
        Other,
    }
    let class = |c: u8| match c {
        c if c.is_ascii_alphabetic() => Class::Alpha,
        c if c.is_ascii_digit() => Class::Digit,
        b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => Class::Space,
        _ => Class::Other,
    };
    let run = |from: usize, c: &Class| {
        let mut j = from;
        while j < b.len() && class(b[j]) == *c {
            j += 1;
        }
        j
    };
    let mut words = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\'' {
            let rest = &b[i + 1..];
            let n = ["s", "t", "re", "ve", "m", "ll", "d"]
                .iter()
                .find(|s| rest.starts_with(s.as_bytes()))
                .map(|s| s.len());
            if let Some(n) = n {
                words.push(&b[i..i + 1 + n]);
                i += 1 + n;
                continue;
            }
        }
        let start = i;
        let lead = usize::from(b[i] == b' ' && i + 1 < b.len() && class(b[i + 1]) != Class::Space);
        let c = class(b[i + lead]);
        let end = match c {
            Class::Space => {
                let j = run(i, &Class::Space);
                // Leave the last space to the word after it.
                if j < b.len() && j - i > 1 {
                    j - 1
                } else {
                    j
                }
            }
            c => run(i + lead, &c),
        };
        words.push(&b[start..end]);
        i = end;
    }
    words
}

/// A loaded Whisper model.
pub struct WhisperModel {
    pub file: GgufFile,
    pub config: WhisperConfig,
    pub vocab: Vocab,
    pub filters: MelFilters,
}

impl WhisperModel {
    /// The model of a GGUF file already read.
    pub fn from_gguf(file: GgufFile) -> Result<WhisperModel, SpeechError> {
        let config = WhisperConfig::from_gguf(&file)?;
        let vocab = Vocab::from_gguf(&file, config.n_vocab)?;
        let t = file
            .tensor(keys::MEL_FILTERS)
            .ok_or_else(|| SpeechError::BadModel("no tensor 'mel_filters'".into()))?;
        let want = [(crate::mel::N_FFT / 2 + 1) as u64, config.n_mels];
        if t.shape() != want || t.dtype() != wgllm_core::DType::F32 {
            return Err(SpeechError::BadModel(format!(
                "mel_filters is {} {:?}, expected f32 {want:?}",
                t.dtype(),
                t.shape()
            )));
        }
        // A file streamed to the device keeps no tensor bytes: every Whisper model's bank is
        // the Slaney one, computed here instead.
        let filters = match file.holds_tensor_data() {
            true => MelFilters {
                n_mel: config.n_mels as usize,
                n_freq: want[0] as usize,
                data: file
                    .tensor_data(t)?
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            },
            false => MelFilters::slaney(config.n_mels as usize),
        };
        Ok(WhisperModel {
            file,
            config,
            vocab,
            filters,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::split_words;

    fn split(s: &str) -> Vec<String> {
        split_words(s.as_bytes())
            .into_iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    }

    #[test]
    fn words_split_as_gpt2_does() {
        assert_eq!(split("Hello world"), ["Hello", " world"]);
        assert_eq!(
            split("it's 2024!!  ok"),
            ["it", "'s", " 2024", "!!", " ", " ok"]
        );
        assert_eq!(split(" a  "), [" a", "  "]);
    }
}
