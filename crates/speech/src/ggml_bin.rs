//! whisper.cpp's model files (`ggml-tiny.en.bin`, `ggml-large-v3-q5_0.bin`, ...) read into the
//! GGUF form this crate runs ([`crate::model`] documents its keys): the eleven hyperparameters,
//! the mel filter bank, the vocabulary's byte strings and the tensors under whisper.cpp's own
//! names, in f32, f16, q4_0, q4_1, q5_0, q5_1 or q8_0; and the GGUF form written back as
//! whisper.cpp's file ([`from_model`]), so whisper.cpp runs the same weights (a synthetic model's
//! too) beside wgllm.

use wgllm_core::DType;
use wgllm_gguf::{Array, GgufFile, GgufWriter, Value};
use wgllm_models::tokenizer::encode_byte_level;

use crate::error::SpeechError;
use crate::model::keys;

/// `ggml` in the file's first four bytes, little-endian.
pub const MAGIC: u32 = 0x6767_6d6c;

/// Whether `bytes` start as a whisper.cpp model file.
pub fn is_ggml_bin(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == MAGIC
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], SpeechError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(SpeechError::BadModel(format!(
                "the file ends inside {what} (offset {}, {} bytes)",
                self.pos,
                self.b.len()
            )));
        };
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn i32(&mut self, what: &str) -> Result<i32, SpeechError> {
        let s = self.take(4, what)?;
        Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// A count or extent: non-negative and at most `max`.
    fn count(&mut self, what: &str, max: i64) -> Result<usize, SpeechError> {
        let v = self.i32(what)?;
        if v < 0 || i64::from(v) > max {
            return Err(SpeechError::BadModel(format!("{what} is {v} (0 to {max})")));
        }
        Ok(v as usize)
    }
}

/// The GGUF form of whisper.cpp model file `bytes`.
pub fn to_gguf(bytes: &[u8]) -> Result<GgufFile, SpeechError> {
    let w = to_writer(bytes)?;
    Ok(GgufFile::from_bytes(w.to_vec().into())?)
}

/// The GGUF writer holding whisper.cpp model file `bytes` (what `wgllm convert` writes out).
pub fn to_writer(bytes: &[u8]) -> Result<GgufWriter, SpeechError> {
    if !is_ggml_bin(bytes) {
        return Err(SpeechError::BadModel(
            "no 'ggml' magic: not a whisper.cpp model file".into(),
        ));
    }
    let mut r = Reader { b: bytes, pos: 4 };
    const BIG: i64 = 1 << 20;
    let mut hp = [0usize; 11];
    let names = [
        "n_vocab",
        "n_audio_ctx",
        "n_audio_state",
        "n_audio_head",
        "n_audio_layer",
        "n_text_ctx",
        "n_text_state",
        "n_text_head",
        "n_text_layer",
        "n_mels",
        "ftype",
    ];
    for (v, name) in hp.iter_mut().zip(names) {
        *v = r.count(name, BIG)?;
    }
    let [n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, _ftype] =
        hp;
    if n_vocab == 0 || n_audio_state == 0 || n_text_state == 0 || n_mels == 0 {
        return Err(SpeechError::BadModel(format!(
            "hyperparameters {hp:?} have a zero extent"
        )));
    }

    let filt_mel = r.count("the mel filters' n_mel", 512)?;
    let filt_fft = r.count("the mel filters' n_fft", 4096)?;
    if filt_mel != n_mels {
        return Err(SpeechError::BadModel(format!(
            "{filt_mel} mel filters for a model of {n_mels} mel bins"
        )));
    }
    let filt = r.take(4 * filt_mel * filt_fft, "the mel filters")?.to_vec();

    let n_words = r.count("the vocabulary size", BIG)?;
    let mut tokens = Vec::with_capacity(n_vocab);
    for i in 0..n_words {
        let len = r.count("a token's length", 1 << 16)?;
        let word = r.take(len, &format!("token {i}"))?;
        tokens.push(encode_byte_level(word));
    }
    if tokens.len() > n_vocab {
        return Err(SpeechError::BadModel(format!(
            "{} vocabulary entries for n_vocab {n_vocab}",
            tokens.len()
        )));
    }

    let mut w = GgufWriter::new();
    let u = |v: usize| Value::U32(v as u32);
    w.add_metadata(keys::ARCH, Value::String("whisper".into()))?;
    w.add_metadata(keys::AUDIO_CTX, u(n_audio_ctx))?;
    w.add_metadata(keys::AUDIO_STATE, u(n_audio_state))?;
    w.add_metadata(keys::AUDIO_HEAD, u(n_audio_head))?;
    w.add_metadata(keys::AUDIO_LAYER, u(n_audio_layer))?;
    w.add_metadata(keys::TEXT_CTX, u(n_text_ctx))?;
    w.add_metadata(keys::TEXT_STATE, u(n_text_state))?;
    w.add_metadata(keys::TEXT_HEAD, u(n_text_head))?;
    w.add_metadata(keys::TEXT_LAYER, u(n_text_layer))?;
    w.add_metadata(keys::MELS, u(n_mels))?;
    w.add_metadata(keys::TOKENIZER, Value::String("whisper".into()))?;
    w.add_metadata(keys::TOKENS, Value::Array(Array::String(tokens)))?;
    w.add_tensor(
        keys::MEL_FILTERS,
        DType::F32,
        &[filt_fft as u64, filt_mel as u64],
        filt,
    )?;

    while r.pos < bytes.len() {
        let n_dims = r.count("a tensor's rank", 4)?;
        let name_len = r.count("a tensor name's length", 1024)?;
        let ttype = r.i32("a tensor's type")?;
        let mut ne = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            ne.push(r.count("a tensor extent", 1 << 30)? as u64);
        }
        let name = String::from_utf8(r.take(name_len, "a tensor name")?.to_vec())
            .map_err(|_| SpeechError::BadModel("a tensor name is not UTF-8".into()))?;
        let dtype = u32::try_from(ttype)
            .ok()
            .and_then(DType::from_gguf_id)
            .filter(|d| {
                matches!(
                    d,
                    DType::F32
                        | DType::F16
                        | DType::Q4_0
                        | DType::Q4_1
                        | DType::Q5_0
                        | DType::Q5_1
                        | DType::Q8_0
                )
            })
            .ok_or_else(|| {
                SpeechError::BadModel(format!(
                    "tensor '{name}' has type {ttype}, not f32, f16, q4_0, q4_1, q5_0, q5_1 or q8_0"
                ))
            })?;
        let n: u64 = ne.iter().product();
        let row = dtype
            .row_bytes(ne.first().copied().unwrap_or(1))
            .ok_or_else(|| {
                SpeechError::BadModel(format!(
                    "tensor '{name}': rows of {ne:?} are not whole {dtype} blocks"
                ))
            })?;
        let size = row * (n / ne.first().copied().unwrap_or(1).max(1));
        let data = r.take(size as usize, &format!("tensor '{name}'"))?;
        // whisper.cpp keeps the convolution biases as [1, n_state]; here they are vectors.
        if name.starts_with("encoder.conv")
            && name.ends_with(".bias")
            && ne.len() == 2
            && ne[0] == 1
        {
            ne.remove(0);
        }
        w.add_tensor(name, dtype, &ne, data.to_vec())?;
    }
    Ok(w)
}

/// whisper.cpp's model file of `m` (the inverse of [`to_gguf`]).
pub fn from_model(m: &crate::model::WhisperModel) -> Result<Vec<u8>, SpeechError> {
    let c = &m.config;
    let f = &m.file;
    let mut out = Vec::new();
    let i32s = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&(v as i32).to_le_bytes());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    let ftype = match f
        .tensor("decoder.token_embedding.weight")
        .map(|t| t.dtype())
    {
        Some(DType::F32) => 0,
        Some(DType::Q4_0) => 2,
        Some(DType::Q4_1) => 3,
        Some(DType::Q5_0) => 8,
        Some(DType::Q5_1) => 9,
        Some(DType::Q8_0) => 7,
        _ => 1,
    };
    for v in [
        c.n_vocab,
        c.n_audio_ctx,
        c.n_audio_state,
        c.n_audio_head,
        u64::from(c.n_audio_layer),
        c.n_text_ctx,
        c.n_text_state,
        c.n_text_head,
        u64::from(c.n_text_layer),
        c.n_mels,
        ftype,
    ] {
        i32s(&mut out, v);
    }
    i32s(&mut out, m.filters.n_mel as u64);
    i32s(&mut out, m.filters.n_freq as u64);
    out.extend(m.filters.data.iter().flat_map(|v| v.to_le_bytes()));
    // The regular tokens, as whisper.cpp's files hold them.
    let n_regular = (m.vocab.eot as usize + 1).min(m.vocab.tokens.len());
    i32s(&mut out, n_regular as u64);
    for t in &m.vocab.tokens[..n_regular] {
        i32s(&mut out, t.len() as u64);
        out.extend_from_slice(t);
    }
    for t in f.tensors().iter().filter(|t| t.name() != keys::MEL_FILTERS) {
        let mut ne = t.shape().to_vec();
        if t.name().starts_with("encoder.conv") && t.name().ends_with(".bias") {
            ne.insert(0, 1);
        }
        i32s(&mut out, ne.len() as u64);
        i32s(&mut out, t.name().len() as u64);
        i32s(&mut out, u64::from(t.dtype().gguf_id()));
        for &n in &ne {
            i32s(&mut out, n);
        }
        out.extend_from_slice(t.name().as_bytes());
        out.extend_from_slice(f.tensor_data(t)?);
    }
    Ok(out)
}
