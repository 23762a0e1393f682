//! Llama-family decoder (Llama 2/3, Mistral, SmolLM): RMSNorm, RoPE (adjacent pairs, as the GGUF
//! converter permutes Q/K for llama.cpp), grouped-query attention, SwiGLU feed-forward, optional
//! tied output embedding. Paper: <https://arxiv.org/abs/2302.13971>.

use wgllm_core::op::RopeMode;
use wgllm_gguf::GgufFile;

use super::common::{build_prenorm_decoder, Flavor, Hparams};
use super::{StepGraph, StepShape};
use crate::error::ModelError;

/// The llama layer: no biases, no QK-norm, adjacent-pair RoPE.
pub(super) const FLAVOR: Flavor = Flavor {
    rope_mode: RopeMode::Normal,
    qkv_bias: false,
    qk_norm: false,
};

/// Builds one step: embeddings → `n_layer` × (attention + feed-forward) → norm → logits of the
/// `out_rows` tokens.
pub fn build_step(c: &Hparams, f: &GgufFile, s: StepShape) -> Result<StepGraph, ModelError> {
    build_prenorm_decoder(c, f, s, FLAVOR)
}
