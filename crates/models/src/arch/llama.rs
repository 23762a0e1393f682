//! Llama-family decoder (Llama 2/3, Mistral, SmolLM): RMSNorm, RoPE (adjacent pairs, as the GGUF
//! converter permutes Q/K for llama.cpp), grouped-query attention, SwiGLU feed-forward, optional
//! tied output embedding. Paper: <https://arxiv.org/abs/2302.13971>.

use wgllm_core::op::{GluOp, RopeMode, RopeParams};
use wgllm_core::{DType, Graph};
use wgllm_gguf::GgufFile;

use super::{weight, StepGraph, StepShape};
use crate::error::ModelError;

/// Hyperparameters of a llama-family model, from `llama.*` metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u32,
    pub n_ff: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    pub n_rot: u32,
    pub rope_base: f32,
    pub rms_eps: f32,
    pub n_ctx_train: u64,
    pub tied_output: bool,
}

impl LlamaConfig {
    /// Reads the hyperparameters, checking they fit together.
    pub fn from_gguf(f: &GgufFile) -> Result<LlamaConfig, ModelError> {
        let arch = f.architecture()?.to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let n_embd = f.get_u64(&key("embedding_length"))?;
        let n_head = f.get_u64(&key("attention.head_count"))?;
        let n_head_kv = match f.get(&key("attention.head_count_kv")) {
            Some(_) => f.get_u64(&key("attention.head_count_kv"))?,
            None => n_head,
        };
        let bad = |k: &str, v: u64, why: &str| ModelError::BadMetadata {
            key: key(k),
            value: v.to_string(),
            why: why.into(),
        };
        if n_head == 0 || n_embd % n_head != 0 {
            return Err(bad(
                "attention.head_count",
                n_head,
                "must divide embedding_length",
            ));
        }
        if n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(bad(
                "attention.head_count_kv",
                n_head_kv,
                "must divide head_count",
            ));
        }
        let head_dim = match f.get(&key("attention.key_length")) {
            Some(_) => f.get_u64(&key("attention.key_length"))?,
            None => n_embd / n_head,
        };
        let n_rot = match f.get(&key("rope.dimension_count")) {
            Some(_) => f.get_u32(&key("rope.dimension_count"))?,
            None => head_dim as u32,
        };
        let emb = f
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let n_vocab = emb.shape().get(1).copied().unwrap_or(0);
        Ok(LlamaConfig {
            n_vocab,
            n_embd,
            n_layer: f.get_u32(&key("block_count"))?,
            n_ff: f.get_u64(&key("feed_forward_length"))?,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_base: f
                .get(&key("rope.freq_base"))
                .map_or(Ok(10_000.0), |_| f.get_f32(&key("rope.freq_base")))?,
            rms_eps: f.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            n_ctx_train: f.get_u64(&key("context_length"))?,
            tied_output: f.tensor("output.weight").is_none(),
        })
    }
}

/// Builds one step: embeddings → `n_layer` × (attention + feed-forward) → norm → logits of the
/// `out_rows` tokens. Each layer writes its K/V rows into the `State` caches `cache_k.{il}` /
/// `cache_v.{il}` (`[head_dim·n_head_kv, n_ctx]`) before attending over them.
pub fn build_step(c: &LlamaConfig, f: &GgufFile, s: StepShape) -> Result<StepGraph, ModelError> {
    let mut g = Graph::new();
    let n = s.n_tokens as u64;
    let ctx = s.n_ctx as u64;
    let (hd, nh, nkv) = (c.head_dim, c.n_head, c.n_head_kv);
    let tokens = g.input("tokens", DType::I32, [n, 1, 1, 1])?;
    let positions = g.input("positions", DType::I32, [n, 1, 1, 1])?;
    let kv_slots = g.input("kv_slots", DType::I64, [n, 1, 1, 1])?;
    let mask = g.input("mask", DType::F32, [ctx, n, 1, 1])?;
    let out_rows = g.input("out_rows", DType::I32, [s.n_outputs as u64, 1, 1, 1])?;

    let tok_embd = weight(&mut g, f, "token_embd.weight", &[c.n_embd, c.n_vocab])?;
    let mut x = g.get_rows(tok_embd, tokens)?;
    let rope = RopeParams {
        mode: RopeMode::Normal,
        n_dims: c.n_rot,
        sections: [0; 4],
        n_ctx_orig: c.n_ctx_train as u32,
        freq_base: c.rope_base,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    let kv_row = hd * nkv;
    let kv_row_bytes = s
        .kv_dtype
        .row_bytes(kv_row)
        .ok_or_else(|| ModelError::BadMetadata {
            key: "kv cache dtype".into(),
            value: s.kv_dtype.to_string(),
            why: format!("a KV row of {kv_row} values is not whole blocks"),
        })?;
    let head_bytes = kv_row_bytes / nkv;
    for il in 0..c.n_layer {
        let w = |name: &str| format!("blk.{il}.{name}.weight");
        let residual = x;
        let attn_norm = weight(&mut g, f, &w("attn_norm"), &[c.n_embd])?;
        let h = g.rms_norm(x, c.rms_eps)?;
        let h = g.mul(h, attn_norm)?;
        let wq = weight(&mut g, f, &w("attn_q"), &[c.n_embd, hd * nh])?;
        let wk = weight(&mut g, f, &w("attn_k"), &[c.n_embd, kv_row])?;
        let wv = weight(&mut g, f, &w("attn_v"), &[c.n_embd, kv_row])?;
        let q = g.mul_mat(wq, h)?;
        let k = g.mul_mat(wk, h)?;
        let v = g.mul_mat(wv, h)?;
        let q = g.reshape(q, [hd, nh, n, 1])?;
        let k = g.reshape(k, [hd, nkv, n, 1])?;
        let q = g.rope(q, positions, None, rope)?;
        let k = g.rope(k, positions, None, rope)?;
        // Write this step's K/V rows into the caches, then attend over the whole cache.
        let cache_k = g.state(&format!("cache_k.{il}"), s.kv_dtype, [kv_row, ctx, 1, 1])?;
        let cache_v = g.state(&format!("cache_v.{il}"), s.kv_dtype, [kv_row, ctx, 1, 1])?;
        let k2 = g.reshape(k, [kv_row, n, 1, 1])?;
        let ck = g.set_rows(cache_k, k2, kv_slots)?;
        let cv = g.set_rows(cache_v, v, kv_slots)?;
        let ts = s.kv_dtype.type_size() as u64;
        let nb = [ts, kv_row_bytes, head_bytes, kv_row_bytes * ctx];
        let kview = g.view(ck, [hd, ctx, nkv, 1], nb, 0)?;
        let vview = g.view(cv, [hd, ctx, nkv, 1], nb, 0)?;
        let qp = g.permute(q, [0, 2, 1, 3])?;
        let scale = 1.0 / (hd as f32).sqrt();
        let att = g.flash_attn_ext(qp, kview, vview, Some(mask), None, scale, 0.0, 0.0)?;
        let att = g.reshape(att, [hd * nh, n, 1, 1])?;
        let wo = weight(&mut g, f, &w("attn_output"), &[hd * nh, c.n_embd])?;
        let o = g.mul_mat(wo, att)?;
        x = g.add(o, residual)?;

        let residual = x;
        let ffn_norm = weight(&mut g, f, &w("ffn_norm"), &[c.n_embd])?;
        let h = g.rms_norm(x, c.rms_eps)?;
        let h = g.mul(h, ffn_norm)?;
        let wg = weight(&mut g, f, &w("ffn_gate"), &[c.n_embd, c.n_ff])?;
        let wu = weight(&mut g, f, &w("ffn_up"), &[c.n_embd, c.n_ff])?;
        let wd = weight(&mut g, f, &w("ffn_down"), &[c.n_ff, c.n_embd])?;
        let gate = g.mul_mat(wg, h)?;
        let up = g.mul_mat(wu, h)?;
        let act = g.glu_split(gate, up, GluOp::Swiglu)?;
        let down = g.mul_mat(wd, act)?;
        x = g.add(down, residual)?;
    }
    // Only the requested rows go through the final norm and the (large) output matrix.
    let x = g.get_rows(x, out_rows)?;
    let out_norm = weight(&mut g, f, "output_norm.weight", &[c.n_embd])?;
    let x = g.rms_norm(x, c.rms_eps)?;
    let x = g.mul(x, out_norm)?;
    let out_w = if c.tied_output {
        tok_embd
    } else {
        weight(&mut g, f, "output.weight", &[c.n_embd, c.n_vocab])?
    };
    let logits = g.mul_mat(out_w, x)?;
    g.set_name(logits, "logits");
    g.mark_output(logits)?;
    Ok(StepGraph {
        graph: g,
        shape: s,
        tokens,
        positions,
        kv_slots,
        mask,
        out_rows,
        logits,
    })
}
