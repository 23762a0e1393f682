//! BERT encoders (`bert`: all-MiniLM, BGE, E5, GTE) as llama.cpp's converter writes them:
//! token + position + token-type embeddings and a LayerNorm, then `n_layer` post-norm layers
//! (`x = norm(x + attn(x))`, `x = norm(x + ffn(x))`, every projection with a bias, GELU in the
//! feed-forward), non-causal attention. Paper: <https://arxiv.org/abs/1810.04805>. The GELU is
//! the exact (erf) one Hugging Face's BERT computes, which sentence-transformers' embeddings
//! are; llama.cpp takes its tanh approximation.
//!
//! One graph embeds a batch of `n_seq` sequences padded to `n_len` tokens: the mask hides each
//! sequence's padding keys (and every other sequence: the batch is a dimension of its own), and
//! pooling is a product of each sequence's hidden states with a weight row (`1/len` for mean,
//! one-hot for cls and last), so a padded row never reaches a result.

use wgllm_core::op::UnaryOp;
use wgllm_core::{DType, Graph, TensorId};
use wgllm_gguf::GgufFile;

use super::weight;
use crate::error::ModelError;

/// How token states become one embedding (`<arch>.pooling_type`, llama.cpp's
/// `llama_pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// 0: one embedding per token.
    None,
    /// 1: the mean over the sequence's tokens.
    Mean,
    /// 2: the first token's (`[CLS]`).
    Cls,
    /// 3: the last token's.
    Last,
}

impl Pooling {
    /// The pooling stored as `v`; `Err` names what is unsupported.
    pub fn from_stored(v: u32) -> Result<Pooling, String> {
        match v {
            0 => Ok(Pooling::None),
            1 => Ok(Pooling::Mean),
            2 => Ok(Pooling::Cls),
            3 => Ok(Pooling::Last),
            4 => Err("rank pooling (a reranker's classification head) is not supported".into()),
            other => Err(format!(
                "{other} is not a pooling type (0 none, 1 mean, 2 cls, 3 last)"
            )),
        }
    }

    /// The name the command line and the API use.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// A BERT encoder's hyperparameters, from `bert.*` metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u32,
    pub n_ff: u64,
    pub n_head: u64,
    pub head_dim: u64,
    pub norm_eps: f32,
    /// Positions the model has embeddings for: the longest sequence.
    pub n_ctx_train: u64,
    /// Rows of `token_types.weight` (segment A, B...).
    pub n_token_types: u64,
    /// The pooling the file states (`bert.pooling_type`; mean when absent).
    pub pooling: Pooling,
}

impl BertConfig {
    /// Reads the hyperparameters, checking they fit together.
    pub fn from_gguf(f: &GgufFile) -> Result<BertConfig, ModelError> {
        let arch = f.architecture()?.to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let bad = |k: &str, v: &dyn std::fmt::Display, why: &str| ModelError::BadMetadata {
            key: key(k),
            value: v.to_string(),
            why: why.into(),
        };
        let n_embd = f.get_u64(&key("embedding_length"))?;
        let n_head = f.get_u64(&key("attention.head_count"))?;
        if n_head == 0 || n_embd % n_head != 0 {
            return Err(bad(
                "attention.head_count",
                &n_head,
                "must divide embedding_length",
            ));
        }
        if f.get(&key("attention.causal")).is_some() && f.get_bool(&key("attention.causal"))? {
            return Err(bad(
                "attention.causal",
                &true,
                "a BERT encoder attends both ways",
            ));
        }
        let pooling = match f.get(&key("pooling_type")) {
            None => Pooling::Mean,
            Some(_) => {
                let v = f.get_u32(&key("pooling_type"))?;
                Pooling::from_stored(v).map_err(|why| bad("pooling_type", &v, &why))?
            }
        };
        let rows = |name: &str| {
            f.tensor(name)
                .map(|t| t.shape().get(1).copied().unwrap_or(1))
                .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
        };
        Ok(BertConfig {
            n_vocab: rows("token_embd.weight")?,
            n_embd,
            n_layer: f.get_u32(&key("block_count"))?,
            n_ff: f.get_u64(&key("feed_forward_length"))?,
            n_head,
            head_dim: n_embd / n_head,
            norm_eps: f.get_f32(&key("attention.layer_norm_epsilon"))?,
            n_ctx_train: f.get_u64(&key("context_length"))?,
            n_token_types: rows("token_types.weight")?,
            pooling,
        })
    }
}

/// The batch shape one encoder graph is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EncodeShape {
    /// Sequences in the batch.
    pub n_seq: u32,
    /// Tokens each sequence is padded to.
    pub n_len: u32,
    pub pooling: Pooling,
}

/// An encoder graph and the handles its runner feeds and reads.
pub struct EncodeGraph {
    pub graph: Graph,
    /// I32 `[n_len · n_seq]` token ids, sequence after sequence.
    pub tokens: TensorId,
    /// I32 `[n_len · n_seq]` positions (`0..n_len` in each sequence).
    pub positions: TensorId,
    /// F32 `[n_len, n_len, 1, n_seq]`: 0 where a query may see a key, -inf at padding keys;
    /// for a causal model `[n_len, n_len, 1, 1]`, -inf at later keys.
    pub mask: TensorId,
    /// F32 `[n_len, 1, n_seq]` pooling weights of each sequence's rows (absent without
    /// pooling).
    pub pool: Option<TensorId>,
    /// F32 `[n_embd, n_seq]` pooled embeddings, or `[n_embd, n_len · n_seq]` token states.
    pub embeddings: TensorId,
    /// [`EncodeGraph::embeddings`] scaled to unit length.
    pub normalized: TensorId,
}

/// One graph under construction.
struct Builder<'a> {
    g: Graph,
    f: &'a GgufFile,
    c: &'a BertConfig,
}

impl Builder<'_> {
    fn weight(&mut self, name: &str, want: &[u64]) -> Result<TensorId, ModelError> {
        weight(&mut self.g, self.f, name, want)
    }

    /// LayerNorm over dim 0 with the affine weight and bias `{name}.weight` / `{name}.bias`.
    fn layer_norm(&mut self, x: TensorId, name: &str) -> Result<TensorId, ModelError> {
        let e = self.c.n_embd;
        let w = self.weight(&format!("{name}.weight"), &[e])?;
        let b = self.weight(&format!("{name}.bias"), &[e])?;
        let h = self.g.norm(x, self.c.norm_eps)?;
        let h = self.g.mul(h, w)?;
        Ok(self.g.add(h, b)?)
    }

    /// `{name}.weight · x + {name}.bias`, `[n_in, n]` → `[n_out, n]`.
    fn linear(&mut self, x: TensorId, name: &str, n_out: u64) -> Result<TensorId, ModelError> {
        let w = self.weight(&format!("{name}.weight"), &[self.g.ne(x)[0], n_out])?;
        let b = self.weight(&format!("{name}.bias"), &[n_out])?;
        let y = self.g.mul_mat(w, x)?;
        Ok(self.g.add(y, b)?)
    }

    /// An embedding table's rows for `ids`.
    fn embed(&mut self, name: &str, rows: u64, ids: TensorId) -> Result<TensorId, ModelError> {
        let table = self.weight(name, &[self.c.n_embd, rows])?;
        Ok(self.g.get_rows(table, ids)?)
    }
}

/// Builds the encoder graph of one batch shape.
pub fn build_encode(
    c: &BertConfig,
    f: &GgufFile,
    s: EncodeShape,
) -> Result<EncodeGraph, ModelError> {
    if s.n_seq == 0 || s.n_len == 0 || u64::from(s.n_len) > c.n_ctx_train {
        return Err(ModelError::BadSession(format!(
            "an encoder batch of {} sequences of {} tokens (the model has {} positions)",
            s.n_seq, s.n_len, c.n_ctx_train
        )));
    }
    let (e, nh, hd) = (c.n_embd, c.n_head, c.head_dim);
    let (len, seqs) = (u64::from(s.n_len), u64::from(s.n_seq));
    let n = len * seqs;
    let mut b = Builder {
        g: Graph::new(),
        f,
        c,
    };
    let tokens = b.g.input("tokens", DType::I32, [n, 1, 1, 1])?;
    let positions = b.g.input("positions", DType::I32, [n, 1, 1, 1])?;
    let mask = b.g.input("mask", DType::F32, [len, len, 1, seqs])?;

    let x = b.embed("token_embd.weight", c.n_vocab, tokens)?;
    // Every token is of type 0 (one segment, as llama.cpp embeds): row 0 of the type table.
    let types = b.weight("token_types.weight", &[e, c.n_token_types])?;
    let nb = b.g.node(types).layout.nb;
    let type0 = b.g.view(types, [e, 1, 1, 1], nb, 0)?;
    let x = b.g.add(x, type0)?;
    let p = b.embed("position_embd.weight", c.n_ctx_train, positions)?;
    let x = b.g.add(x, p)?;
    let mut x = b.layer_norm(x, "token_embd_norm")?;

    let scale = 1.0 / (hd as f32).sqrt();
    for il in 0..c.n_layer {
        let blk = |name: &str| format!("blk.{il}.{name}");
        // [hd, nh, len, seqs] → [hd, len, nh, seqs], as flash attention takes them.
        let heads = |b: &mut Builder, t: TensorId| -> Result<TensorId, ModelError> {
            let t = b.g.reshape(t, [hd, nh, len, seqs])?;
            Ok(b.g.permute(t, [0, 2, 1, 3])?)
        };
        let q = b.linear(x, &blk("attn_q"), e)?;
        let k = b.linear(x, &blk("attn_k"), e)?;
        let v = b.linear(x, &blk("attn_v"), e)?;
        let (q, k, v) = (heads(&mut b, q)?, heads(&mut b, k)?, heads(&mut b, v)?);
        let att =
            b.g.flash_attn_ext(q, k, v, Some(mask), None, scale, 0.0, 0.0)?;
        let att = b.g.reshape(att, [e, n, 1, 1])?;
        let att = b.linear(att, &blk("attn_output"), e)?;
        let h = b.g.add(att, x)?;
        let h = b.layer_norm(h, &blk("attn_output_norm"))?;
        let up = b.linear(h, &blk("ffn_up"), c.n_ff)?;
        let up = b.g.unary(up, UnaryOp::GeluErf)?;
        let down = b.linear(up, &blk("ffn_down"), e)?;
        let y = b.g.add(down, h)?;
        x = b.layer_norm(y, &blk("layer_output_norm"))?;
    }

    pool(b.g, s, x, e, tokens, positions, mask)
}

/// Ends an embedding graph: the token states `x` (`[e, n_len · n_seq]`) pooled as the shape
/// says, unit-length copies beside them, both marked as outputs.
pub(crate) fn pool(
    mut g: Graph,
    s: EncodeShape,
    x: TensorId,
    e: u64,
    tokens: TensorId,
    positions: TensorId,
    mask: TensorId,
) -> Result<EncodeGraph, ModelError> {
    let (len, seqs) = (u64::from(s.n_len), u64::from(s.n_seq));
    let (pool, embeddings) = match s.pooling {
        Pooling::None => (None, x),
        Pooling::Mean | Pooling::Cls | Pooling::Last => {
            let pool = g.input("pool", DType::F32, [len, 1, seqs, 1])?;
            // [e, len, seqs] → [len, e, seqs]: each sequence's rows weighted by its pool row.
            let x = g.reshape(x, [e, len, seqs, 1])?;
            let xt = g.transpose(x)?;
            let xt = g.cont(xt, DType::F32)?;
            let pooled = g.mul_mat(xt, pool)?;
            (Some(pool), g.reshape(pooled, [e, seqs, 1, 1])?)
        }
    };
    // sentence-transformers' `Normalize` (torch's `F.normalize`) eps.
    let normalized = g.l2_norm(embeddings, 1e-12)?;
    g.set_name(embeddings, "embeddings");
    g.mark_output(embeddings)?;
    g.mark_output(normalized)?;
    Ok(EncodeGraph {
        graph: g,
        tokens,
        positions,
        mask,
        pool,
        embeddings,
        normalized,
    })
}
