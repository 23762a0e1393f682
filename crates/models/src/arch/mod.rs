//! Model architectures, each built as a `Graph` for one step shape from GGUF metadata and
//! weights. One file per architecture; `common` holds the hyperparameters and blocks they share.

pub mod bert;
mod common;
mod decoder_encode;
pub mod gemma3;
pub mod llama;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3moe;

pub use common::{Hparams, MoeParams};

use wgllm_core::{DType, Graph, TensorId};
use wgllm_gguf::GgufFile;

use crate::error::ModelError;

/// The shape class a step graph is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// Tokens processed by one run.
    pub n_tokens: u32,
    /// KV cache capacity in tokens.
    pub n_ctx: u32,
    /// Cache rows the queries attend: `n_kv` rows from row `kv_first` (within `n_ctx`). A
    /// decode step early in a long context attends only the rows written so far, as llama.cpp
    /// attends its cache's used cells; one of several sequences attends only its own rows.
    pub kv_first: u32,
    pub n_kv: u32,
    /// Rows of logits produced (which token rows: the `out_rows` input), at most `n_tokens`.
    pub n_outputs: u32,
    /// dtype of the KV cache.
    pub kv_dtype: DType,
    /// Build the output head (each row's argmax and top-k on the backend). Graphs whose
    /// callers read whole logits rows (perplexity) leave it out: the top-k of a whole prompt's
    /// logits is work, and bindings, for nothing.
    pub head: bool,
}

/// A model step as a graph, with the handles a session feeds and reads.
pub struct StepGraph {
    pub graph: Graph,
    pub shape: StepShape,
    /// I32 `[n_tokens]` token ids.
    pub tokens: TensorId,
    /// I32 `[n_tokens]` positions.
    pub positions: TensorId,
    /// I64 `[n_tokens]` KV cache rows the tokens are written to.
    pub kv_slots: TensorId,
    /// F32 `[n_kv, n_tokens]` causal attention mask (0 or -inf) over the attended rows.
    pub mask: TensorId,
    /// The mask of the sliding-window layers, for models that have them.
    pub mask_swa: Option<SwaMask>,
    /// I32 `[n_outputs]` which token rows produce logits.
    pub out_rows: TensorId,
    /// F32 `[n_vocab, n_outputs]` logits.
    pub logits: TensorId,
    /// The output head, when [`StepShape::head`] asked for it.
    pub head: Option<Head>,
}

/// The output head of a step graph: what a session reads back instead of whole logits rows.
#[derive(Clone, Copy, Debug)]
pub struct Head {
    /// I32 `[1, n_outputs]`: the first index of each row's largest logit (a view of the first
    /// of `top_ids`, so a NaN logit, which top-k ranks above every number, is taken here too).
    pub argmax: TensorId,
    /// I32 `[k, n_outputs]`: the ids of each row's `k = min(GPU_TOP_K, n_vocab)` largest logits,
    /// largest first, ties to the lower id.
    pub top_ids: TensorId,
    /// F32 `[1, k, n_outputs]`: the logits of `top_ids`.
    pub top_vals: TensorId,
}

/// Candidates the output head selects per row on the backend (the top_k kernel's largest k).
pub const GPU_TOP_K: usize = 64;

/// A second attention mask input, F32 `[n_kv, n_tokens]`: key `j` is visible to the query at
/// position `p` iff `p - window < j <= p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwaMask {
    pub mask: TensorId,
    /// Positions visible to a query, its own included.
    pub window: u32,
}

/// The architectures wgllm can build, parsed from GGUF metadata.
#[derive(Clone, Debug)]
pub enum Architecture {
    Llama(Hparams),
    Qwen2(Hparams),
    Qwen3(Hparams),
    Qwen3Moe(qwen3moe::Qwen3MoeConfig),
    Gemma3(gemma3::Gemma3Config),
}

/// Names accepted in `general.architecture`.
pub const SUPPORTED: &[&str] = &["llama", "qwen2", "qwen3", "qwen3moe", "gemma3"];

impl Architecture {
    /// Reads the architecture and its hyperparameters from `file`.
    pub fn from_gguf(file: &GgufFile) -> Result<Architecture, ModelError> {
        let name = file.architecture()?;
        match name {
            "llama" => Ok(Architecture::Llama(Hparams::from_gguf(file)?)),
            "qwen2" => Ok(Architecture::Qwen2(Hparams::from_gguf(file)?)),
            "qwen3" => Ok(Architecture::Qwen3(Hparams::from_gguf(file)?)),
            "qwen3moe" => Ok(Architecture::Qwen3Moe(qwen3moe::Qwen3MoeConfig::from_gguf(
                file,
            )?)),
            "gemma3" => Ok(Architecture::Gemma3(gemma3::Gemma3Config::from_gguf(file)?)),
            "bert" => Err(ModelError::EmbeddingModel(name.to_string())),
            other => Err(ModelError::UnknownArchitecture {
                name: other.to_string(),
                supported: SUPPORTED.join(", "),
            }),
        }
    }

    /// Builds the graph of one step of `shape` over `file`'s weights.
    pub fn build_step(&self, file: &GgufFile, shape: StepShape) -> Result<StepGraph, ModelError> {
        match self {
            Architecture::Llama(c) => llama::build_step(c, file, shape),
            Architecture::Qwen2(c) => qwen2::build_step(c, file, shape),
            Architecture::Qwen3(c) => qwen3::build_step(c, file, shape),
            Architecture::Qwen3Moe(c) => qwen3moe::build_step(c, file, shape),
            Architecture::Gemma3(c) => gemma3::build_step(c, file, shape),
        }
    }

    /// The hyperparameters all architectures have.
    pub fn hparams(&self) -> &Hparams {
        match self {
            Architecture::Llama(c) | Architecture::Qwen2(c) | Architecture::Qwen3(c) => c,
            Architecture::Qwen3Moe(c) => &c.hp,
            Architecture::Gemma3(c) => &c.hp,
        }
    }

    /// The mixture-of-experts feed-forward of every layer, for the architectures that have one.
    pub fn moe(&self) -> Option<&MoeParams> {
        match self {
            Architecture::Qwen3Moe(c) => Some(&c.moe),
            _ => None,
        }
    }

    /// Vocabulary size (rows of logits).
    pub fn n_vocab(&self) -> usize {
        self.hparams().n_vocab as usize
    }

    /// Context length the model was trained with.
    pub fn n_ctx_train(&self) -> usize {
        self.hparams().n_ctx_train as usize
    }
}

/// Adds the weight `name` from `file` to `graph`, checking its extents: its bytes, or for a
/// file whose tensor data was streamed to the device ([`GgufFile::holds_tensor_data`]), a
/// resident weight of that name.
pub fn weight(
    graph: &mut Graph,
    file: &GgufFile,
    name: &str,
    want: &[u64],
) -> Result<TensorId, ModelError> {
    let info = file
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    if info.shape() != want {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            got: info.shape().to_vec(),
            want: want.to_vec(),
        });
    }
    let ne = info.layout().ne;
    if !file.holds_tensor_data() {
        // A streamed file: its tensors went to the device as they arrived (`wgllm-web`).
        return Ok(graph.resident_weight(name, info.dtype(), ne)?);
    }
    let bytes = file.tensor_bytes(info)?;
    Ok(graph.weight(name, info.dtype(), ne, bytes)?)
}

/// An embedding model's architecture: a BERT encoder, or a pre-norm decoder whose file states
/// a pooling (`{arch}.pooling_type`, as llama.cpp writes Qwen3-Embedding).
#[derive(Clone, Debug)]
pub struct EmbeddingArch(EmbedKind);

#[derive(Clone, Debug)]
enum EmbedKind {
    Bert(bert::BertConfig),
    Decoder(Hparams, common::Flavor, bert::Pooling),
}

/// Decoders that embed when their file states a pooling.
const EMBEDDING_DECODERS: &[&str] = &["llama", "qwen2", "qwen3"];

impl EmbeddingArch {
    /// Reads the architecture; a file that is no embedding model is an error naming it.
    pub fn from_gguf(file: &GgufFile) -> Result<EmbeddingArch, ModelError> {
        let arch = file.architecture()?;
        if arch == "bert" {
            return Ok(EmbeddingArch(EmbedKind::Bert(bert::BertConfig::from_gguf(
                file,
            )?)));
        }
        let key = format!("{arch}.pooling_type");
        if !EMBEDDING_DECODERS.contains(&arch) || file.get(&key).is_none() {
            return Err(ModelError::UnknownArchitecture {
                name: format!("{arch} (as an embedding model)"),
                supported: "bert, and llama, qwen2 or qwen3 with a pooling_type".into(),
            });
        }
        let v = file.get_u32(&key)?;
        let pooling = bert::Pooling::from_stored(v).map_err(|why| ModelError::BadMetadata {
            key,
            value: v.to_string(),
            why,
        })?;
        let flavor = match arch {
            "llama" => llama::FLAVOR,
            "qwen2" => qwen2::FLAVOR,
            _ => qwen3::FLAVOR,
        };
        Ok(EmbeddingArch(EmbedKind::Decoder(
            Hparams::from_gguf(file)?,
            flavor,
            pooling,
        )))
    }

    /// Whether `file` holds an embedding model.
    pub fn is_embedding(file: &GgufFile) -> bool {
        match file.architecture() {
            Ok("bert") => true,
            Ok(a) => {
                EMBEDDING_DECODERS.contains(&a) && file.get(&format!("{a}.pooling_type")).is_some()
            }
            Err(_) => false,
        }
    }

    /// Values in one embedding.
    pub fn n_embd(&self) -> u64 {
        match &self.0 {
            EmbedKind::Bert(c) => c.n_embd,
            EmbedKind::Decoder(hp, ..) => hp.n_embd,
        }
    }

    /// Tokens in the vocabulary.
    pub fn n_vocab(&self) -> u64 {
        match &self.0 {
            EmbedKind::Bert(c) => c.n_vocab,
            EmbedKind::Decoder(hp, ..) => hp.n_vocab,
        }
    }

    /// The longest sequence (positions the model was trained for).
    pub fn n_ctx_train(&self) -> u64 {
        match &self.0 {
            EmbedKind::Bert(c) => c.n_ctx_train,
            EmbedKind::Decoder(hp, ..) => hp.n_ctx_train,
        }
    }

    /// The pooling the file states.
    pub fn pooling(&self) -> bert::Pooling {
        match &self.0 {
            EmbedKind::Bert(c) => c.pooling,
            EmbedKind::Decoder(.., p) => *p,
        }
    }

    /// Whether a token attends only to itself and the tokens before it.
    pub fn causal(&self) -> bool {
        matches!(self.0, EmbedKind::Decoder(..))
    }

    /// Builds the graph of one batch shape over `file`'s weights.
    pub fn build(
        &self,
        file: &GgufFile,
        s: bert::EncodeShape,
    ) -> Result<bert::EncodeGraph, ModelError> {
        match &self.0 {
            EmbedKind::Bert(c) => bert::build_encode(c, file, s),
            EmbedKind::Decoder(hp, fl, _) => decoder_encode::build_decoder_encode(hp, *fl, file, s),
        }
    }
}
