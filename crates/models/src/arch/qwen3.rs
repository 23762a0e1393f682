//! Qwen3 dense decoder: the llama layer without Q/K/V biases, with a per-head RMSNorm of Q and K
//! (`attn_q_norm` / `attn_k_norm`, over `head_dim`) before NEOX RoPE. `head_dim` comes from
//! `qwen3.attention.key_length` and need not be `n_embd / n_head` (Qwen3-0.6B: 1024 / 16 heads
//! of 128). Report: <https://arxiv.org/abs/2505.09388>.

use wgllm_core::op::RopeMode;
use wgllm_gguf::GgufFile;

use super::common::{build_prenorm_decoder, Flavor, Hparams};
use super::{StepGraph, StepShape};
use crate::error::ModelError;

/// The Qwen3 layer: QK-norm, NEOX RoPE, no biases.
pub(super) const FLAVOR: Flavor = Flavor {
    rope_mode: RopeMode::Neox,
    qkv_bias: false,
    qk_norm: true,
};

/// Builds one step of a Qwen3 (dense) model.
pub fn build_step(c: &Hparams, f: &GgufFile, s: StepShape) -> Result<StepGraph, ModelError> {
    build_prenorm_decoder(c, f, s, FLAVOR)
}
