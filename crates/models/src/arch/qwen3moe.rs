//! Qwen3 mixture of experts (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (QK-norm, NEOX
//! RoPE, no biases) with every feed-forward a mixture of experts: `qwen3moe.expert_count`
//! SwiGLU experts of `expert_feed_forward_length`, `expert_used_count` a token, weighted by the
//! router's softmax probabilities renormalized over the chosen experts (`norm_topk_prob`; as
//! llama.cpp's `qwen3moe` graph). Report: <https://arxiv.org/abs/2505.09388>.

use wgllm_gguf::GgufFile;

use super::common::{build_decoder, Hparams, MoeParams};
use super::qwen3::FLAVOR;
use super::{StepGraph, StepShape};
use crate::error::ModelError;

/// Hyperparameters of a Qwen3-MoE model.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3MoeConfig {
    pub hp: Hparams,
    pub moe: MoeParams,
}

impl Qwen3MoeConfig {
    pub fn from_gguf(f: &GgufFile) -> Result<Qwen3MoeConfig, ModelError> {
        Ok(Qwen3MoeConfig {
            hp: Hparams::from_gguf(f)?,
            moe: MoeParams::from_gguf(f, true)?,
        })
    }
}

/// Builds one step of a Qwen3-MoE model.
pub fn build_step(c: &Qwen3MoeConfig, f: &GgufFile, s: StepShape) -> Result<StepGraph, ModelError> {
    build_decoder(&c.hp, f, s, FLAVOR, Some(&c.moe))
}
