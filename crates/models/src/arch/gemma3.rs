//! Gemma 3 decoder (text), following llama.cpp's `src/models/gemma3.cpp`. Report:
//! <https://arxiv.org/abs/2503.19786>.
//!
//! Differences from the llama layer:
//! - token embeddings are scaled by `sqrt(n_embd)`;
//! - RMSNorm weights are used as stored: the GGUF converter already added the 1 that Hugging Face
//!   adds at run time (`x·(1+w)`);
//! - Q and K are RMS-normed per head (`attn_{q,k}_norm`) before NEOX RoPE;
//! - the attention and FFN outputs go through `post_attention_norm` / `post_ffw_norm` before
//!   their residual adds, and the FFN is GELU(tanh)-gated (`GEGLU`);
//! - five of every six layers are local (`il % 6 < 5`): they see only the last
//!   `gemma3.attention.sliding_window` positions and use RoPE base 10000 without scaling; the
//!   global ones see the whole causal context with `gemma3.rope.freq_base` and the file's
//!   scaling;
//! - attention scale `1/sqrt(head_dim)`, except 27B (62 layers): `1/sqrt(n_embd/n_head)`;
//! - the output matrix is the token embedding (released files have no `output.weight`).
//!
//! Every layer keeps a full `n_ctx` KV cache, local ones included. A local layer only needs its
//! last `sliding_window` rows, so a ring buffer of that size would save most of the cache memory
//! for long contexts; that is a later optimisation.

use wgllm_core::op::{GluOp, RopeMode};
use wgllm_gguf::GgufFile;

use super::common::{blk, AttnSpec, Builder, Hparams};
use super::{StepGraph, StepShape};
use crate::error::ModelError;

/// Every `SWA_PATTERN`-th layer is global (llama.cpp `hparams.set_swa_pattern(6)`).
const SWA_PATTERN: u32 = 6;
/// RoPE base of the local layers (llama.cpp `rope_freq_base_train_swa`).
const SWA_ROPE_BASE: f32 = 10_000.0;
/// Layer count of Gemma 3 27B, whose attention scale uses `n_embd / n_head`.
const N_LAYER_27B: u32 = 62;

/// Hyperparameters of a Gemma 3 model, from `gemma3.*` metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Config {
    pub hp: Hparams,
    /// Positions a local layer attends to, its own included.
    pub sliding_window: u32,
    /// Multiplies `q·k` before the softmax.
    pub attn_scale: f32,
}

impl Gemma3Config {
    /// Reads the hyperparameters, refusing features this graph does not build.
    pub fn from_gguf(f: &GgufFile) -> Result<Gemma3Config, ModelError> {
        let hp = Hparams::from_gguf(f)?;
        let key = "gemma3.attention.sliding_window";
        let sliding_window = f.get_u32(key)?;
        if sliding_window == 0 {
            return Err(ModelError::BadMetadata {
                key: key.into(),
                value: "0".into(),
                why: "must be positive".into(),
            });
        }
        for key in [
            "gemma3.final_logit_softcapping",
            "gemma3.attn_logit_softcapping",
        ] {
            if f.get(key).is_some() && f.get_f32(key)? != 0.0 {
                return Err(ModelError::BadMetadata {
                    key: key.into(),
                    value: f.get_f32(key)?.to_string(),
                    why: "logit soft-capping is not supported for gemma3".into(),
                });
            }
        }
        let attn_scale = if hp.n_layer == N_LAYER_27B {
            1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt()
        } else {
            1.0 / (hp.head_dim as f32).sqrt()
        };
        Ok(Gemma3Config {
            hp,
            sliding_window,
            attn_scale,
        })
    }

    /// Whether layer `il` attends through the sliding window.
    pub fn is_local(&self, il: u32) -> bool {
        il % SWA_PATTERN < SWA_PATTERN - 1
    }
}

/// Builds one step: scaled embeddings → `n_layer` × (local or global attention with post-norm,
/// GEGLU feed-forward with post-norm) → norm → logits of the `out_rows` tokens.
pub fn build_step(c: &Gemma3Config, f: &GgufFile, s: StepShape) -> Result<StepGraph, ModelError> {
    let hp = &c.hp;
    let mut b = Builder::new(f, hp, s, Some(c.sliding_window))?;
    let global = AttnSpec {
        rope: hp.rope(RopeMode::Neox, hp.rope_base, hp.rope_freq_scale),
        scale: c.attn_scale,
        qkv_bias: false,
        qk_norm: true,
    };
    let local = AttnSpec {
        rope: hp.rope(RopeMode::Neox, SWA_ROPE_BASE, 1.0),
        ..global
    };
    let (tok_embd, x) = b.embed()?;
    let mut x = b.g.scale(x, (hp.n_embd as f32).sqrt(), 0.0)?;
    for il in 0..hp.n_layer {
        let (spec, mask) = match b.mask_swa {
            Some(swa) if c.is_local(il) => (&local, swa.mask),
            _ => (&global, b.mask),
        };
        let h = b.norm(x, &blk(il, "attn_norm"))?;
        let a = b.attention(il, h, spec, mask)?;
        let a = b.norm(a, &blk(il, "post_attention_norm"))?;
        x = b.g.add(a, x)?;
        let h = b.norm(x, &blk(il, "ffn_norm"))?;
        let m = b.ffn(il, h, GluOp::Geglu)?;
        let m = b.norm(m, &blk(il, "post_ffw_norm"))?;
        x = b.g.add(m, x)?;
    }
    b.finish(x, tok_embd)
}
