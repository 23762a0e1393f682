//! CTranslate2 Whisper checkpoints (faster-whisper's format: `model.bin`, `vocabulary.txt`) into
//! the GGUF form: the fused query/key/value (and cross key/value) projections split, the key
//! bias (zeros: Whisper has none) dropped, vectors widened to f32, matrices kept as stored
//! (f16 or f32) or widened, the mel filter bank computed (the checkpoint has none).

use std::collections::HashMap;
use std::path::Path;

use half::f16;
use wgllm_core::DType;
use wgllm_gguf::{Array, GgufWriter, Value};

use crate::error::SpeechError;
use crate::mel::MelFilters;
use crate::model::keys;

struct Var<'a> {
    dims: Vec<u64>,
    dtype: u8,
    data: &'a [u8],
}

fn bad(why: impl Into<String>) -> SpeechError {
    SpeechError::BadModel(format!("CTranslate2 checkpoint: {}", why.into()))
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SpeechError> {
        let s = self
            .b
            .get(self.pos..self.pos + n)
            .ok_or_else(|| bad(format!("the file ends at offset {}", self.pos)))?;
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, SpeechError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn string(&mut self) -> Result<String, SpeechError> {
        let n = self.take(2)?;
        let n = usize::from(u16::from_le_bytes([n[0], n[1]]));
        let s = self.take(n)?;
        Ok(String::from_utf8_lossy(s)
            .trim_end_matches('\0')
            .to_string())
    }
}

/// The variables of a CTranslate2 `model.bin` (binary version 6).
fn read_vars(b: &[u8]) -> Result<HashMap<String, Var<'_>>, SpeechError> {
    let mut r = Reader { b, pos: 0 };
    let version = r.u32()?;
    if version != 6 {
        return Err(bad(format!("binary version {version} (6 is read)")));
    }
    let spec = r.string()?;
    if spec != "WhisperSpec" {
        return Err(SpeechError::NotWhisper(format!(
            "a CTranslate2 {spec} checkpoint"
        )));
    }
    r.u32()?;
    let n_vars = r.u32()?;
    let mut vars = HashMap::new();
    for _ in 0..n_vars {
        let name = r.string()?;
        let rank = usize::from(r.take(1)?[0]);
        let mut dims = Vec::with_capacity(rank);
        for _ in 0..rank {
            dims.push(u64::from(r.u32()?));
        }
        let dtype = r.take(1)?[0];
        let n = r.u32()? as usize;
        let data = r.take(n)?;
        vars.insert(name, Var { dims, dtype, data });
    }
    Ok(vars)
}

/// Values of a float variable as f32.
fn floats(v: &Var) -> Result<Vec<f32>, SpeechError> {
    match v.dtype {
        0 => Ok(v.data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        4 => Ok(v.data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()),
        d => Err(bad(format!(
            "a weight of CTranslate2 type {d}: int8-quantized checkpoints are not read (use a float16 or float32 one)"
        ))),
    }
}

/// A scalar integer variable.
fn scalar(vars: &HashMap<String, Var>, name: &str) -> Result<i64, SpeechError> {
    let v = vars
        .get(name)
        .ok_or_else(|| bad(format!("no variable '{name}'")))?;
    Ok(match (v.dtype, v.data) {
        (1, [a]) => i64::from(*a as i8),
        (2, [a, b]) => i64::from(i16::from_le_bytes([*a, *b])),
        (3, [a, b, c, d]) => i64::from(i32::from_le_bytes([*a, *b, *c, *d])),
        _ => return Err(bad(format!("'{name}' is not an integer scalar"))),
    })
}

/// Writes tensor `dst` from part `part` of `parts` of variable `src`.
type Put<'a> = dyn FnMut(&str, &str, u64, u64) -> Result<(), SpeechError> + 'a;

/// Converts the CTranslate2 checkpoint in `dir` into a GGUF writer; matrices as stored, or
/// widened to f32 when `f32` (for a browser without `shader-f16`).
pub fn convert(dir: &Path, f32: bool) -> Result<GgufWriter, SpeechError> {
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read(&p).map_err(|err| SpeechError::Io {
            path: p.display().to_string(),
            err,
        })
    };
    let bin = read("model.bin")?;
    let vocab = String::from_utf8(read("vocabulary.txt")?)
        .map_err(|_| bad("vocabulary.txt is not UTF-8"))?;
    let vars = read_vars(&bin)?;
    for (k, want) in [
        ("decoder/pre_norm", 1),
        ("decoder/scale_embeddings", 0),
        ("decoder/alibi", 0),
    ] {
        if vars.contains_key(k) && scalar(&vars, k)? != want {
            return Err(bad(format!(
                "{k} is not {want}: not a standard Whisper model"
            )));
        }
    }
    let get = |name: &str| {
        vars.get(name)
            .ok_or_else(|| bad(format!("no variable '{name}'")))
    };
    let layers = |side: &str| {
        (0..)
            .take_while(|i| vars.contains_key(&format!("{side}/layer_{i}/ffn/linear_0/weight")))
            .count() as u32
    };
    let (n_enc, n_dec) = (layers("encoder"), layers("decoder"));
    let emb = get("decoder/embeddings/weight")?;
    let conv1 = get("encoder/conv1/weight")?;
    let [n_vocab, e] = emb.dims[..] else {
        return Err(bad("the embeddings are not a matrix"));
    };
    let n_mels = conv1
        .dims
        .get(1)
        .copied()
        .ok_or_else(|| bad("conv1 is not 3-D"))?;
    let ctx = |name: &str| get(name).map(|v| v.dims[0]);

    let mut w = GgufWriter::new();
    let u = |v: u64| Value::U32(v as u32);
    w.add_metadata(keys::ARCH, Value::String("whisper".into()))?;
    for (k, v) in [
        (
            keys::AUDIO_CTX,
            ctx("encoder/position_encodings/encodings")?,
        ),
        (keys::AUDIO_STATE, e),
        (keys::AUDIO_HEAD, scalar(&vars, "encoder/num_heads")? as u64),
        (keys::AUDIO_LAYER, u64::from(n_enc)),
        (keys::TEXT_CTX, ctx("decoder/position_encodings/encodings")?),
        (keys::TEXT_STATE, e),
        (keys::TEXT_HEAD, scalar(&vars, "decoder/num_heads")? as u64),
        (keys::TEXT_LAYER, u64::from(n_dec)),
        (keys::MELS, n_mels),
    ] {
        w.add_metadata(k, u(v))?;
    }
    w.add_metadata(keys::TOKENIZER, Value::String("whisper".into()))?;
    // The regular tokens (before <|endoftext|>), already GPT-2 byte-level strings.
    let lines: Vec<&str> = vocab.lines().collect();
    if lines.len() as u64 != n_vocab {
        return Err(bad(format!(
            "vocabulary.txt has {} tokens, the embeddings {n_vocab}",
            lines.len()
        )));
    }
    let n_regular = lines
        .iter()
        .position(|&l| l == "<|endoftext|>")
        .ok_or_else(|| bad("no <|endoftext|>"))?;
    let tokens = lines[..n_regular].iter().map(|s| s.to_string()).collect();
    w.add_metadata(keys::TOKENS, Value::Array(Array::String(tokens)))?;
    let f = MelFilters::slaney(n_mels as usize);
    let filt: Vec<u8> = f.data.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(
        keys::MEL_FILTERS,
        DType::F32,
        &[f.n_freq as u64, n_mels],
        filt,
    )?;

    // `part` of `parts` equal row blocks of variable `src` as tensor `dst` (ggml order: the
    // checkpoint's dims reversed); vectors in f32.
    let mut put = |dst: &str, src: &str, part: u64, parts: u64| -> Result<(), SpeechError> {
        let v = get(src)?;
        let mut ne: Vec<u64> = v.dims.iter().rev().copied().collect();
        let last = ne.len() - 1;
        if !ne[last].is_multiple_of(parts) {
            return Err(bad(format!(
                "'{src}' {:?} does not split in {parts}",
                v.dims
            )));
        }
        ne[last] /= parts;
        let bytes = v.data.len() / parts as usize;
        let slice = Var {
            dims: Vec::new(),
            dtype: v.dtype,
            data: &v.data[part as usize * bytes..(part as usize + 1) * bytes],
        };
        if ne.len() == 1 || dst.ends_with("positional_embedding") || f32 {
            let data: Vec<u8> = floats(&slice)?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            w.add_tensor(dst, DType::F32, &ne, data)?;
        } else {
            let dt = match v.dtype {
                0 => DType::F32,
                4 => DType::F16,
                _ => return floats(&slice).map(|_| ()),
            };
            w.add_tensor(dst, dt, &ne, slice.data.to_vec())?;
        }
        Ok(())
    };
    put("encoder.conv1.weight", "encoder/conv1/weight", 0, 1)?;
    put("encoder.conv1.bias", "encoder/conv1/bias", 0, 1)?;
    put("encoder.conv2.weight", "encoder/conv2/weight", 0, 1)?;
    put("encoder.conv2.bias", "encoder/conv2/bias", 0, 1)?;
    put(
        "encoder.positional_embedding",
        "encoder/position_encodings/encodings",
        0,
        1,
    )?;
    put(
        "decoder.positional_embedding",
        "decoder/position_encodings/encodings",
        0,
        1,
    )?;
    put(
        "decoder.token_embedding.weight",
        "decoder/embeddings/weight",
        0,
        1,
    )?;
    let norm = |put: &mut Put, dst: &str, src: &str| {
        put(&format!("{dst}.weight"), &format!("{src}/gamma"), 0, 1)?;
        put(&format!("{dst}.bias"), &format!("{src}/beta"), 0, 1)
    };
    norm(&mut put, "encoder.ln_post", "encoder/layer_norm")?;
    norm(&mut put, "decoder.ln", "decoder/layer_norm")?;
    for (side, n) in [("encoder", n_enc), ("decoder", n_dec)] {
        for i in 0..n {
            let (p, c) = (format!("{side}.blocks.{i}"), format!("{side}/layer_{i}"));
            let sa = format!("{c}/self_attention");
            norm(
                &mut put,
                &format!("{p}.attn_ln"),
                &format!("{sa}/layer_norm"),
            )?;
            for (j, t) in ["query", "key", "value"].iter().enumerate() {
                put(
                    &format!("{p}.attn.{t}.weight"),
                    &format!("{sa}/linear_0/weight"),
                    j as u64,
                    3,
                )?;
                if *t != "key" {
                    put(
                        &format!("{p}.attn.{t}.bias"),
                        &format!("{sa}/linear_0/bias"),
                        j as u64,
                        3,
                    )?;
                }
            }
            put(
                &format!("{p}.attn.out.weight"),
                &format!("{sa}/linear_1/weight"),
                0,
                1,
            )?;
            put(
                &format!("{p}.attn.out.bias"),
                &format!("{sa}/linear_1/bias"),
                0,
                1,
            )?;
            if side == "decoder" {
                let ca = format!("{c}/attention");
                norm(
                    &mut put,
                    &format!("{p}.cross_attn_ln"),
                    &format!("{ca}/layer_norm"),
                )?;
                put(
                    &format!("{p}.cross_attn.query.weight"),
                    &format!("{ca}/linear_0/weight"),
                    0,
                    1,
                )?;
                put(
                    &format!("{p}.cross_attn.query.bias"),
                    &format!("{ca}/linear_0/bias"),
                    0,
                    1,
                )?;
                put(
                    &format!("{p}.cross_attn.key.weight"),
                    &format!("{ca}/linear_1/weight"),
                    0,
                    2,
                )?;
                put(
                    &format!("{p}.cross_attn.value.weight"),
                    &format!("{ca}/linear_1/weight"),
                    1,
                    2,
                )?;
                put(
                    &format!("{p}.cross_attn.value.bias"),
                    &format!("{ca}/linear_1/bias"),
                    1,
                    2,
                )?;
                put(
                    &format!("{p}.cross_attn.out.weight"),
                    &format!("{ca}/linear_2/weight"),
                    0,
                    1,
                )?;
                put(
                    &format!("{p}.cross_attn.out.bias"),
                    &format!("{ca}/linear_2/bias"),
                    0,
                    1,
                )?;
            }
            let ffn = format!("{c}/ffn");
            norm(
                &mut put,
                &format!("{p}.mlp_ln"),
                &format!("{ffn}/layer_norm"),
            )?;
            put(
                &format!("{p}.mlp.0.weight"),
                &format!("{ffn}/linear_0/weight"),
                0,
                1,
            )?;
            put(
                &format!("{p}.mlp.0.bias"),
                &format!("{ffn}/linear_0/bias"),
                0,
                1,
            )?;
            put(
                &format!("{p}.mlp.2.weight"),
                &format!("{ffn}/linear_1/weight"),
                0,
                1,
            )?;
            put(
                &format!("{p}.mlp.2.bias"),
                &format!("{ffn}/linear_1/bias"),
                0,
                1,
            )?;
        }
    }
    Ok(w)
}
