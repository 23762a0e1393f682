//! Embedding models: texts in, one vector per text out (or one per token without pooling).
//!
//! An [`Embedder`] tokenizes each input, sorts the inputs by length and packs them into batches
//! of `n_seq` sequences padded to `n_len` tokens (powers of two where the limits allow: `n_len`
//! at most the model's positions, `n_seq · n_len` at most [`EmbedConfig::batch_tokens`],
//! `n_seq` at most [`EmbedConfig::max_seqs`]), and runs each batch as one encoder graph. A
//! graph is compiled once per batch shape and kept, as a session keeps its step graphs. No KV
//! cache: every run starts from the inputs alone.
//!
//! The embedder owns no backend: each call takes the one to run on, and the graphs it compiled
//! there are kept for the next call (they run on the device they were compiled for; a call
//! with another kind of backend is refused).
//! Reads are awaited ([`Embedder::embed_ids_async`], the browser's way); the blocking calls
//! wrap them for backends whose reads complete at once.

use std::collections::hash_map::{Entry, HashMap};

use wgllm_core::{Backend, Executable};
use wgllm_gguf::GgufFile;

use crate::arch::bert::{EncodeGraph, EncodeShape, Pooling};
use crate::arch::EmbeddingArch;
use crate::error::ModelError;
use crate::session::{f32s, now};
use crate::tokenizer::Tokenizer;

/// The fewest tokens a batch is padded to: shorter ones would only add graph shapes.
pub const MIN_LEN: u32 = 8;

/// How an embedder batches its inputs.
#[derive(Clone, Copy, Debug)]
pub struct EmbedConfig {
    /// At most this many tokens (sequences × padded length) run in one graph.
    pub batch_tokens: u32,
    /// At most this many sequences run in one graph.
    pub max_seqs: u32,
    /// The pooling to use instead of the model's own.
    pub pooling: Option<Pooling>,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig {
            batch_tokens: 8192,
            max_seqs: 256,
            pooling: None,
        }
    }
}

/// What [`Embedder::tokenize`] does with an input longer than the model's positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truncate {
    /// Refuse it.
    No,
    /// Keep its first tokens, and its final `[SEP]` or EOS where it ends with one ([`cut`]).
    Yes,
}

/// A compiled batch shape.
struct Compiled {
    graph: EncodeGraph,
    exe: Box<dyn Executable>,
}

/// An embedding model ready to embed; see the module doc.
pub struct Embedder {
    file: GgufFile,
    /// The backend the graphs were compiled on (its name), once one was.
    compiled_on: Option<String>,
    arch: EmbeddingArch,
    tokenizer: Tokenizer,
    cfg: EmbedConfig,
    pooling: Pooling,
    compiled: HashMap<EncodeShape, Compiled>,
}

/// Whether `file` holds an embedding model [`Embedder`] runs.
pub fn is_embedding_model(file: &GgufFile) -> bool {
    EmbeddingArch::is_embedding(file)
}

impl Embedder {
    /// Reads the model's hyperparameters and tokenizer; graphs are compiled on the backend of
    /// the first call as batch shapes first occur.
    pub fn new(file: &GgufFile, cfg: EmbedConfig) -> Result<Embedder, ModelError> {
        let arch = EmbeddingArch::from_gguf(file)?;
        let tokenizer = Tokenizer::from_gguf(file).map_err(|e| ModelError::BadMetadata {
            key: "tokenizer.ggml.*".into(),
            value: String::new(),
            why: e.to_string(),
        })?;
        if cfg.batch_tokens < MIN_LEN || cfg.max_seqs == 0 {
            return Err(ModelError::BadSession(format!(
                "batches of {} tokens and {} sequences (at least {MIN_LEN} and 1)",
                cfg.batch_tokens, cfg.max_seqs
            )));
        }
        Ok(Embedder {
            file: file.clone(),
            compiled_on: None,
            pooling: cfg.pooling.unwrap_or(arch.pooling()),
            arch,
            tokenizer,
            cfg,
            compiled: HashMap::new(),
        })
    }

    /// Compiles the smallest batch shape on `backend`, so that what it cannot run (an op, a
    /// dtype the device lacks) is an error now rather than at the first input.
    pub fn prepare(&mut self, backend: &dyn Backend) -> Result<(), ModelError> {
        let shape = self.shape(self.padded_len(1), 1);
        self.compiled_for(backend, shape).map(|_| ())
    }

    /// The pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Tokens in the model's vocabulary (rows of its embedding table).
    pub fn n_vocab(&self) -> u64 {
        self.arch.n_vocab()
    }

    /// Values in one embedding.
    pub fn dim(&self) -> usize {
        self.arch.n_embd() as usize
    }

    /// The longest input in tokens.
    pub fn max_tokens(&self) -> usize {
        (self.arch.n_ctx_train() as usize).min(self.cfg.batch_tokens as usize)
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The ids of `text` with the model's special tokens, cut to [`Embedder::max_tokens`] under
    /// [`Truncate::Yes`], else an error past it.
    pub fn tokenize(&self, text: &str, truncate: Truncate) -> Result<Vec<u32>, ModelError> {
        let ids = self
            .tokenizer
            .encode_with(text, true, false)
            .map_err(|e| ModelError::BadSession(format!("tokenizing: {e}")))?;
        self.fit(ids, truncate)
    }

    /// `ids` checked against [`Embedder::max_tokens`] (cut under [`Truncate::Yes`]).
    pub fn fit(&self, mut ids: Vec<u32>, truncate: Truncate) -> Result<Vec<u32>, ModelError> {
        let max = self.max_tokens();
        if ids.len() <= max {
            return Ok(ids);
        }
        if truncate == Truncate::No {
            return Err(ModelError::ContextFull {
                need: ids.len(),
                ctx: max,
                max,
            });
        }
        cut(&mut ids, max, &self.tokenizer);
        Ok(ids)
    }

    /// The embeddings of `inputs` (token ids each, as [`Embedder::tokenize`] makes them) on
    /// `backend`, in order: with pooling, one vector of [`Embedder::dim`] values per input;
    /// without, the token states one after another. `normalize` scales each vector to unit
    /// length.
    pub fn embed_ids(
        &mut self,
        backend: &dyn Backend,
        inputs: &[Vec<u32>],
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        now(self.embed_ids_async(backend, inputs, normalize, |_| {}))
    }

    /// [`Embedder::embed_ids`], calling `done` with the number of inputs finished after each
    /// batch (for progress bars).
    pub fn embed_ids_with(
        &mut self,
        backend: &dyn Backend,
        inputs: &[Vec<u32>],
        normalize: bool,
        done: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        now(self.embed_ids_async(backend, inputs, normalize, done))
    }

    /// [`Embedder::embed_ids_with`] awaiting the backend's reads.
    pub async fn embed_ids_async(
        &mut self,
        backend: &dyn Backend,
        inputs: &[Vec<u32>],
        normalize: bool,
        mut done: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() || ids.len() > self.max_tokens() {
                return Err(ModelError::BadSession(format!(
                    "input {i} has {} tokens; an input takes 1 to {}",
                    ids.len(),
                    self.max_tokens()
                )));
            }
            if let Some(&bad) = ids.iter().find(|&&id| u64::from(id) >= self.arch.n_vocab()) {
                return Err(ModelError::BadToken(bad));
            }
        }
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].len()));
        let mut out = vec![Vec::new(); inputs.len()];
        let mut start = 0;
        while start < order.len() {
            let len = self.padded_len(inputs[order[start]].len());
            let fit = (self.cfg.batch_tokens / len).clamp(1, self.cfg.max_seqs) as usize;
            let end = (start + fit).min(order.len());
            let batch: Vec<&[u32]> = order[start..end].iter().map(|&i| &inputs[i][..]).collect();
            let rows = self.run_batch(backend, &batch, len, normalize).await?;
            for (&i, row) in order[start..end].iter().zip(rows) {
                out[i] = row;
            }
            start = end;
            done(start);
        }
        Ok(out)
    }

    /// `n_seq` sequences of `n_len` tokens, pooled as this embedder pools.
    fn shape(&self, n_len: u32, n_seq: u32) -> EncodeShape {
        EncodeShape {
            n_seq,
            n_len,
            pooling: self.pooling,
        }
    }

    /// The graph of `shape`, compiled on `backend` unless it was (graphs belong to the backend
    /// they were compiled on: another is refused).
    fn compiled_for(
        &mut self,
        backend: &dyn Backend,
        shape: EncodeShape,
    ) -> Result<&mut Compiled, ModelError> {
        let name = backend.name();
        match &self.compiled_on {
            Some(on) if *on != name => {
                return Err(ModelError::BadSession(format!(
                    "this embedder's graphs were compiled on the {on} backend, not {name}"
                )))
            }
            _ => self.compiled_on = Some(name),
        }
        match self.compiled.entry(shape) {
            Entry::Occupied(c) => Ok(c.into_mut()),
            Entry::Vacant(slot) => {
                let graph = self.arch.build(&self.file, shape)?;
                let exe = backend.compile(&graph.graph)?;
                Ok(slot.insert(Compiled { graph, exe }))
            }
        }
    }

    /// The padded length of a batch whose longest input has `n` tokens.
    fn padded_len(&self, n: usize) -> u32 {
        let most = self.max_tokens() as u32;
        (n as u32).next_power_of_two().max(MIN_LEN).min(most)
    }

    /// Runs one batch, its sequences padded to `len` tokens and their count to a power of two.
    async fn run_batch(
        &mut self,
        backend: &dyn Backend,
        batch: &[&[u32]],
        len: u32,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let n_seq = (batch.len() as u32)
            .next_power_of_two()
            .min((self.cfg.batch_tokens / len).max(1))
            .min(self.cfg.max_seqs)
            .max(batch.len() as u32);
        let pad = self.tokenizer.pad().unwrap_or(0);
        let (causal, pooling, e) = (self.arch.causal(), self.pooling, self.dim());
        let shape = self.shape(len, n_seq);
        let c = self.compiled_for(backend, shape)?;
        let inputs = batch_inputs(batch, shape, pad, causal);
        let g = &c.graph;
        let mut feed = vec![
            (g.tokens, bytes_i32(&inputs.tokens)),
            (g.positions, bytes_i32(&inputs.positions)),
            (g.mask, bytes_f32(&inputs.mask)),
        ];
        if let Some(pool) = g.pool {
            feed.push((pool, bytes_f32(&inputs.pool)));
        }
        let refs: Vec<_> = feed.iter().map(|(t, b)| (*t, &b[..])).collect();
        c.exe.run(&refs)?;
        let result = if normalize {
            g.normalized
        } else {
            g.embeddings
        };
        let values = f32s(&c.exe.read_async(result).await?);
        let len = len as usize;
        Ok(batch
            .iter()
            .enumerate()
            .map(|(s, ids)| match pooling {
                Pooling::None => values[s * len * e..(s * len + ids.len()) * e].to_vec(),
                _ => values[s * e..(s + 1) * e].to_vec(),
            })
            .collect())
    }
}

/// Cuts `ids` to its first `max` tokens, keeping its last one in the final place when it frames
/// the text (`[SEP]`, or the EOS a last-token embedder pools).
pub fn cut(ids: &mut Vec<u32>, max: usize, tokenizer: &Tokenizer) {
    let Some(&last) = ids.last() else {
        return;
    };
    if ids.len() <= max || max == 0 {
        return;
    }
    ids.truncate(max);
    if tokenizer.sep() == Some(last) || tokenizer.eos() == Some(last) {
        ids[max - 1] = last;
    }
}

/// The host-made inputs of one batch.
struct BatchInputs {
    tokens: Vec<i32>,
    positions: Vec<i32>,
    mask: Vec<f32>,
    pool: Vec<f32>,
}

/// Tokens, positions, the attention mask and the pooling weights of `batch` in `shape`; slots
/// past the batch are all padding (they pool nothing). The mask is one per sequence hiding its
/// padding keys, or with `causal` one lower triangle all sequences share: padding follows a
/// sequence's tokens, so a real token never sees it.
fn batch_inputs(batch: &[&[u32]], shape: EncodeShape, pad: u32, causal: bool) -> BatchInputs {
    let (len, seqs) = (shape.n_len as usize, shape.n_seq as usize);
    let mut tokens = vec![pad as i32; len * seqs];
    let positions: Vec<i32> = (0..len * seqs).map(|i| (i % len) as i32).collect();
    let mut mask = vec![f32::NEG_INFINITY; len * len * if causal { 1 } else { seqs }];
    if causal {
        for q in 0..len {
            mask[q * len..q * len + q + 1].fill(0.0);
        }
    }
    let mut pool = vec![0.0f32; len * seqs];
    for (s, ids) in batch.iter().enumerate() {
        let n = ids.len();
        for (t, &id) in ids.iter().enumerate() {
            tokens[s * len + t] = id as i32;
        }
        for q in (0..len).filter(|_| !causal) {
            mask[(s * len + q) * len..(s * len + q) * len + n].fill(0.0);
        }
        let row = &mut pool[s * len..(s + 1) * len];
        match shape.pooling {
            Pooling::Mean => row[..n].fill(1.0 / n as f32),
            Pooling::Cls => row[0] = 1.0,
            Pooling::Last => row[n - 1] = 1.0,
            Pooling::None => {}
        }
    }
    BatchInputs {
        tokens,
        positions,
        mask,
        pool,
    }
}

fn bytes_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na * nb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_inputs_mask_padding_and_weight_pooling() {
        let shape = EncodeShape {
            n_seq: 2,
            n_len: 4,
            pooling: Pooling::Mean,
        };
        let a = [5u32, 6, 7];
        let b = [8u32, 9];
        let x = batch_inputs(&[&a, &b], shape, 0, false);
        assert_eq!(x.tokens, vec![5, 6, 7, 0, 8, 9, 0, 0]);
        assert_eq!(x.positions, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        // Sequence 1, query 3: keys 0 and 1 visible.
        let row = &x.mask[(4 + 3) * 4..(4 + 4) * 4];
        assert_eq!(row[..2], [0.0, 0.0]);
        assert!(row[2..].iter().all(|v| *v == f32::NEG_INFINITY));
        assert_eq!(x.pool[..4], [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0]);
        assert_eq!(x.pool[4..], [0.5, 0.5, 0.0, 0.0]);
        let last = batch_inputs(
            &[&a],
            EncodeShape {
                pooling: Pooling::Last,
                ..shape
            },
            0,
            true,
        );
        assert_eq!(last.pool[..4], [0.0, 0.0, 1.0, 0.0]);
        // Causal: one shared triangle; query 1 sees keys 0 and 1 only.
        assert_eq!(last.mask.len(), 16);
        assert_eq!(last.mask[4..6], [0.0, 0.0]);
        assert!(last.mask[6..8].iter().all(|v| *v == f32::NEG_INFINITY));
        assert!(last.pool[4..].iter().all(|v| *v == 0.0));
    }

    #[test]
    fn cosine_of_known_vectors() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - 0.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }
}
