//! `wgllm convert`: a Hugging Face checkpoint folder (`config.json`, `*.safetensors`,
//! `tokenizer.json`) into one GGUF file under llama.cpp's tensor names and metadata
//! (`convert_hf_to_gguf.py`), so llama.cpp and wgllm read the result alike.
//!
//! Each architecture is a module that maps checkpoint tensor names to GGUF names (an unknown
//! name is an error naming it: a silently dropped tensor would be a wrong model) and writes its
//! metadata and vocabulary. Weights are read through a memory map (`safetensors`), widened to
//! f32 and stored in the asked type; vectors (norms, biases) stay f32, as llama.cpp keeps them,
//! and a matrix whose rows are not whole blocks of the asked type falls back to f16. The
//! converted tensors are held in memory until the file is written (about the output's size).
//!
//! Adding an architecture: a module with `metadata` and `tensor_name` functions, named in
//! [`Arch::from_config`].

mod bert;
mod bpe;
mod decoder;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype as StDtype, SafeTensors};
use serde_json::Value as Json;
use wgllm_core::DType;
use wgllm_gguf::{GgufWriter, Value};

/// Architectures `convert` knows, by their `config.json` `architectures` entry.
pub const SUPPORTED: &str = "BertModel (bert; sentence-transformers checkpoints too), \
    LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2), Qwen3ForCausalLM (qwen3), Qwen3Model \
    (qwen3 as an embedding model: sentence-transformers' Qwen3-Embedding)";

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: {why}")]
    Safetensors { path: PathBuf, why: String },
    #[error("{0} has no *.safetensors file (PyTorch .bin checkpoints are not read)")]
    NoWeights(PathBuf),
    #[error("config.json: `{key}` {why}")]
    Config { key: String, why: String },
    #[error("unknown architecture {found} in config.json; supported: {SUPPORTED}")]
    UnknownArchitecture { found: String },
    #[error("tensor '{0}' is not part of any model this converter knows; refusing to drop it")]
    UnknownTensor(String),
    #[error("tensor '{name}' is {dtype}; only F32, F16 and BF16 checkpoints are read")]
    TensorDtype { name: String, dtype: String },
    #[error("tensor '{name}': {why}")]
    TensorShape { name: String, why: String },
    #[error("the model has no tensor '{0}'")]
    MissingTensor(String),
    #[error("tokenizer.json: {0}")]
    Tokenizer(String),
    #[error("cannot store weights as {0}: wgllm has no quantizer for it")]
    Type(DType),
    #[error(transparent)]
    Gguf(#[from] wgllm_gguf::GgufError),
    #[error(transparent)]
    Quant(#[from] wgllm_core::Error),
}

type Result<T, E = ConvertError> = std::result::Result<T, E>;

/// What a conversion wrote.
#[derive(Clone, Debug)]
pub struct Converted {
    pub arch: &'static str,
    pub tensors: usize,
    /// Tensors written per dtype.
    pub dtypes: BTreeMap<String, usize>,
    pub bytes: u64,
}

/// A checkpoint folder's files.
pub struct Checkpoint {
    dir: PathBuf,
    pub config: Json,
    maps: Vec<(PathBuf, Mmap)>,
}

/// Reads `dir/name` as JSON.
pub(crate) fn read_json(dir: &Path, name: &str) -> Result<Json> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|source| ConvertError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ConvertError::Json { path, source })
}

impl Checkpoint {
    /// Opens `dir`: its `config.json` and every `*.safetensors` file, memory-mapped.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let config = read_json(dir, "config.json")?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ConvertError::Io { path, source }
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(ConvertError::NoWeights(dir.to_path_buf()));
        }
        let mut maps = Vec::new();
        for path in files {
            let f = File::open(&path).map_err(io(&path))?;
            // SAFETY: the map is read only; a checkpoint changed while it is converted gives
            // wrong weights, not unsafety in our code (the bytes are parsed, never trusted).
            let map = unsafe { Mmap::map(&f) }.map_err(io(&path))?;
            SafeTensors::deserialize(&map).map_err(|e| ConvertError::Safetensors {
                path: path.clone(),
                why: e.to_string(),
            })?;
            maps.push((path, map));
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            config,
            maps,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A `config.json` integer.
    pub(crate) fn cfg_u64(&self, key: &str) -> Result<u64> {
        self.config
            .get(key)
            .and_then(Json::as_u64)
            .ok_or_else(|| ConvertError::Config {
                key: key.into(),
                why: "is missing or not a non-negative integer".into(),
            })
    }

    /// A `config.json` number.
    pub(crate) fn cfg_f32(&self, key: &str) -> Result<f32> {
        self.config
            .get(key)
            .and_then(Json::as_f64)
            .map(|v| v as f32)
            .ok_or_else(|| ConvertError::Config {
                key: key.into(),
                why: "is missing or not a number".into(),
            })
    }

    /// Tensors in all files.
    fn count(&self) -> usize {
        self.maps
            .iter()
            .filter_map(|(_, m)| SafeTensors::deserialize(m).ok())
            .map(|st| st.len())
            .sum()
    }

    /// Every tensor `map` keeps: its GGUF name, extents (innermost first, as GGUF orders them)
    /// and f32 values; `seen` counts every tensor, kept or not.
    fn for_each_tensor(
        &self,
        map: impl Fn(&str) -> Result<Mapped>,
        mut seen: impl FnMut(),
        mut f: impl FnMut(String, Vec<u64>, Vec<f32>) -> Result<()>,
    ) -> Result<()> {
        for (path, bytes) in &self.maps {
            let bad = |e: safetensors::SafeTensorError| ConvertError::Safetensors {
                path: path.clone(),
                why: e.to_string(),
            };
            let st = SafeTensors::deserialize(bytes).map_err(bad)?;
            let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
            names.sort();
            for name in names {
                seen();
                let Mapped::Keep(gguf) = map(&name)? else {
                    continue;
                };
                let view = st.tensor(&name).map_err(bad)?;
                let values = widen(&name, view.dtype(), view.data())?;
                let mut ne: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
                if ne.is_empty() {
                    // A scalar is a vector of one.
                    ne.push(1);
                }
                f(gguf, ne, values)?;
            }
        }
        Ok(())
    }
}

/// A checkpoint's values as f32.
fn widen(name: &str, dtype: StDtype, data: &[u8]) -> Result<Vec<f32>> {
    let pairs = data
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    Ok(match dtype {
        StDtype::F32 => crate::session::f32s(data),
        StDtype::F16 => pairs.map(|b| half::f16::from_bits(b).to_f32()).collect(),
        StDtype::BF16 => pairs.map(|b| half::bf16::from_bits(b).to_f32()).collect(),
        other => {
            return Err(ConvertError::TensorDtype {
                name: name.into(),
                dtype: format!("{other:?}"),
            })
        }
    })
}

/// What an architecture does with one checkpoint tensor.
#[derive(Debug)]
pub(crate) enum Mapped {
    /// Store it under this GGUF name.
    Keep(String),
    /// Not part of the model (a training buffer, an unused head).
    Skip,
}

/// The architectures this converter knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Bert,
    Decoder(decoder::Family),
}

impl Arch {
    fn from_config(config: &Json) -> Result<Arch> {
        let found = config
            .get("architectures")
            .and_then(Json::as_array)
            .and_then(|a| a.first())
            .and_then(Json::as_str)
            .or_else(|| config.get("model_type").and_then(Json::as_str))
            .unwrap_or("(none)");
        match found {
            "BertModel" | "BertForMaskedLM" | "bert" => Ok(Arch::Bert),
            "LlamaForCausalLM" => Ok(Arch::Decoder(decoder::Family::Llama)),
            "Qwen2ForCausalLM" => Ok(Arch::Decoder(decoder::Family::Qwen2)),
            "Qwen3ForCausalLM" | "Qwen3Model" => Ok(Arch::Decoder(decoder::Family::Qwen3)),
            other => Err(ConvertError::UnknownArchitecture {
                found: other.into(),
            }),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Arch::Bert => "bert",
            Arch::Decoder(f) => f.name(),
        }
    }
}

/// The type a tensor of extents `ne` is stored in when `want` is asked for: vectors in f32, a
/// matrix whose rows are not whole blocks of `want` in f16.
pub fn storage_type(want: DType, name: &str, ne: &[u64]) -> DType {
    let matrix = ne.len() >= 2 && ne[1..].iter().any(|&d| d > 1);
    if !matrix || name == "token_types.weight" {
        DType::F32
    } else if !ne[0].is_multiple_of(want.block_size() as u64) {
        DType::F16
    } else {
        want
    }
}

/// Converts the checkpoint in `dir` to a GGUF of weights in `dtype` at `out`; `progress` is
/// told each tensor's index and the count.
pub fn convert(
    dir: &Path,
    dtype: DType,
    out: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<Converted> {
    if !wgllm_core::quant::can_quantize(dtype) || !(dtype.is_float() || dtype.is_quantized()) {
        return Err(ConvertError::Type(dtype));
    }
    let ck = Checkpoint::open(dir)?;
    let arch = Arch::from_config(&ck.config)?;
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String(arch.name().into()))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| arch.name().into());
    w.add_metadata("general.name", Value::String(name))?;
    w.add_metadata("general.file_type", Value::U32(file_type(dtype)))?;
    let extra = match arch {
        Arch::Bert => {
            bert::metadata(&ck, &mut w)?;
            Vec::new()
        }
        Arch::Decoder(f) => {
            let extra = decoder::metadata(f, &ck, &mut w)?;
            bpe::vocab(&ck, &mut w)?;
            extra
        }
    };
    // Llama's Q and K rows are reordered for GGUF's RoPE layout.
    let heads = match arch {
        Arch::Decoder(decoder::Family::Llama) => Some(decoder::heads(&ck)?),
        _ => None,
    };

    let total = ck.count();
    let mut tensors: Vec<(String, DType, Vec<u64>, Vec<u8>)> = Vec::new();
    let mut i = 0;
    let map = |hf: &str| match arch {
        Arch::Bert => bert::tensor_name(hf),
        Arch::Decoder(f) => decoder::tensor_name(f, hf),
    };
    let mut store = |gguf: String, ne: Vec<u64>, values: Vec<f32>| -> Result<()> {
        let dt = storage_type(dtype, &gguf, &ne);
        let row = dt
            .row_bytes(ne[0])
            .ok_or_else(|| ConvertError::TensorShape {
                name: gguf.clone(),
                why: format!("rows of {} values are not whole {dt} blocks", ne[0]),
            })?;
        let rows: u64 = ne[1..].iter().product();
        let mut bytes = vec![0u8; (row * rows) as usize];
        wgllm_core::quant::quantize(dt, &values, &mut bytes)?;
        tensors.push((gguf, dt, ne, bytes));
        Ok(())
    };
    ck.for_each_tensor(
        map,
        || {
            i += 1;
            progress(i, total);
        },
        |gguf, ne, values| {
            let values = match heads {
                Some(h) if gguf.ends_with(".attn_q.weight") => {
                    decoder::permute_rope_rows(&values, &ne, h.n_head)?
                }
                Some(h) if gguf.ends_with(".attn_k.weight") => {
                    decoder::permute_rope_rows(&values, &ne, h.n_head_kv)?
                }
                _ => values,
            };
            store(gguf, ne, values)
        },
    )?;
    for (name, ne, values) in extra {
        store(name, ne, values)?;
    }
    let names = tensors.iter().map(|t| t.0.as_str());
    match arch {
        Arch::Bert => bert::check_tensors(&ck, names)?,
        Arch::Decoder(f) => decoder::check_tensors(f, &ck, names)?,
    }
    tensors.sort_by_key(|t| tensor_order(&t.0));
    let mut dtypes = BTreeMap::new();
    let n_tensors = tensors.len();
    for (name, dt, ne, bytes) in tensors {
        *dtypes.entry(dt.to_string()).or_insert(0) += 1;
        w.add_tensor(name, dt, &ne, bytes)?;
    }
    let io = |source| ConvertError::Io {
        path: out.to_path_buf(),
        source,
    };
    let partial = out.with_extension("gguf.partial");
    let file = File::create(&partial).map_err(io)?;
    w.write_to(std::io::BufWriter::new(file))?;
    std::fs::rename(&partial, out).map_err(io)?;
    let bytes = std::fs::metadata(out).map_err(io)?.len();
    Ok(Converted {
        arch: arch.name(),
        tensors: n_tensors,
        dtypes,
        bytes,
    })
}

/// Model-wide tensors first, then the blocks in order (`blk.2` before `blk.10`).
fn tensor_order(name: &str) -> (u32, String) {
    match name.strip_prefix("blk.") {
        Some(rest) => {
            let (n, tail) = rest.split_once('.').unwrap_or((rest, ""));
            (n.parse::<u32>().map_or(u32::MAX, |n| n + 1), tail.into())
        }
        None => (0, name.into()),
    }
}

/// llama.cpp's `general.file_type` (`llama_ftype`) for weights mostly in `dtype`.
fn file_type(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q8_0 => 7,
        DType::Q5_0 => 8,
        DType::Q5_1 => 9,
        DType::Q2_K => 10,
        DType::Q3_K => 12,
        DType::Q4_K => 15,
        DType::Q5_K => 17,
        DType::Q6_K => 18,
        DType::IQ4_NL => 25,
        DType::IQ4_XS => 30,
        DType::BF16 => 32,
        DType::TQ1_0 => 36,
        DType::TQ2_0 => 37,
        DType::MXFP4 => 38,
        // Not a llama.cpp file type: "guessed" (1024), as llama.cpp writes for mixed files.
        _ => 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_stay_f32_and_odd_rows_fall_back_to_f16() {
        assert_eq!(storage_type(DType::Q8_0, "x.bias", &[384]), DType::F32);
        assert_eq!(storage_type(DType::Q8_0, "a", &[384, 1]), DType::F32);
        assert_eq!(storage_type(DType::Q8_0, "a", &[384, 1536]), DType::Q8_0);
        assert_eq!(storage_type(DType::Q4_K, "a", &[384, 1536]), DType::F16);
        assert_eq!(
            storage_type(DType::F16, "token_types.weight", &[384, 2]),
            DType::F32
        );
    }

    #[test]
    fn blocks_sort_numerically_after_the_model_tensors() {
        let mut v = vec!["blk.10.a", "blk.2.b", "token_embd.weight", "blk.2.a"];
        v.sort_by_key(|n| tensor_order(n));
        assert_eq!(v, ["token_embd.weight", "blk.2.a", "blk.2.b", "blk.10.a"]);
    }
}
