//! The pre-norm decoders (llama, qwen2, qwen3) used as embedders, as Qwen3-Embedding is: the
//! decoder's layers over a batch of sequences padded to one length, each attending causally to
//! its own tokens with no KV cache, then the final norm and the pooling of `bert.rs` (a weight
//! row per sequence: the last token's for `last`, the mean for `mean`). Padding comes after a
//! sequence's tokens, so causal attention never lets a real token see it, and one causal mask
//! serves every sequence.

use wgllm_core::op::GluOp;
use wgllm_core::{DType, Graph, TensorId};
use wgllm_gguf::GgufFile;

use super::bert::{pool, EncodeGraph, EncodeShape};
use super::common::{blk, block_linear, freq_factors, gated_ffn, rms_norm_by, Flavor, Hparams};
use super::weight;
use crate::error::ModelError;

/// Builds the embedding graph of one batch shape for a decoder of `flavor`.
pub(crate) fn build_decoder_encode(
    hp: &Hparams,
    flavor: Flavor,
    f: &GgufFile,
    s: EncodeShape,
) -> Result<EncodeGraph, ModelError> {
    let (len, seqs) = (u64::from(s.n_len), u64::from(s.n_seq));
    if s.n_seq == 0 || s.n_len == 0 || len > hp.n_ctx_train {
        return Err(ModelError::BadSession(format!(
            "an embedding batch of {} sequences of {} tokens (the model has {} positions)",
            s.n_seq, s.n_len, hp.n_ctx_train
        )));
    }
    let n = len * seqs;
    let (e, hd, nh, nkv) = (hp.n_embd, hp.head_dim, hp.n_head, hp.n_head_kv);
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, [n, 1, 1, 1])?;
    let positions = g.input("positions", DType::I32, [n, 1, 1, 1])?;
    // One causal triangle for every sequence (see `embed::batch_inputs`).
    let mask = g.input("mask", DType::F32, [len, len, 1, 1])?;
    let norm = |g: &mut Graph, x: TensorId, name: &str| rms_norm_by(g, f, x, name, hp.rms_eps);
    let table = weight(&mut g, f, "token_embd.weight", &[e, hp.n_vocab])?;
    let mut x = g.get_rows(table, tokens)?;
    let rope = hp.rope(flavor.rope_mode, hp.rope_base, hp.rope_freq_scale);
    let ff = freq_factors(&mut g, f, hp)?;
    let scale = 1.0 / (hd as f32).sqrt();
    for il in 0..hp.n_layer {
        let h = norm(&mut g, x, &blk(il, "attn_norm"))?;
        let q = block_linear(&mut g, f, il, "attn_q", h, hd * nh, flavor.qkv_bias)?;
        let k = block_linear(&mut g, f, il, "attn_k", h, hd * nkv, flavor.qkv_bias)?;
        let v = block_linear(&mut g, f, il, "attn_v", h, hd * nkv, flavor.qkv_bias)?;
        let mut q = g.reshape(q, [hd, nh, n, 1])?;
        let mut k = g.reshape(k, [hd, nkv, n, 1])?;
        if flavor.qk_norm {
            q = norm(&mut g, q, &blk(il, "attn_q_norm"))?;
            k = norm(&mut g, k, &blk(il, "attn_k_norm"))?;
        }
        let q = g.rope(q, positions, ff, rope)?;
        let k = g.rope(k, positions, ff, rope)?;
        // [hd, heads, len, seqs] → [hd, len, heads, seqs], as flash attention takes them.
        let heads = |g: &mut Graph, t: TensorId, h: u64| -> Result<TensorId, ModelError> {
            let t = g.reshape(t, [hd, h, len, seqs])?;
            Ok(g.permute(t, [0, 2, 1, 3])?)
        };
        let (q, k, v) = (
            heads(&mut g, q, nh)?,
            heads(&mut g, k, nkv)?,
            heads(&mut g, v, nkv)?,
        );
        let att = g.flash_attn_ext(q, k, v, Some(mask), None, scale, 0.0, 0.0)?;
        let att = g.reshape(att, [hd * nh, n, 1, 1])?;
        let a = block_linear(&mut g, f, il, "attn_output", att, e, false)?;
        x = g.add(a, x)?;
        let h = norm(&mut g, x, &blk(il, "ffn_norm"))?;
        let down = gated_ffn(&mut g, f, hp, il, h, GluOp::Swiglu)?;
        x = g.add(down, x)?;
    }
    let x = norm(&mut g, x, "output_norm.weight")?;
    pool(g, s, x, e, tokens, positions, mask)
}
