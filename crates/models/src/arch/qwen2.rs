//! Qwen2 / Qwen2.5 decoder: the llama layer with biases on the Q/K/V projections
//! (`blk.N.attn_{q,k,v}.bias`) and NEOX RoPE (rotating halves, as Hugging Face's rotate-half:
//! the converter does not permute Q/K for this architecture). Output tied to the embedding when
//! `output.weight` is absent (the small models). Report: <https://arxiv.org/abs/2407.10671>.

use wgllm_core::op::RopeMode;
use wgllm_gguf::GgufFile;

use super::common::{build_prenorm_decoder, Flavor, Hparams};
use super::{StepGraph, StepShape};
use crate::error::ModelError;

/// The Qwen2 layer: Q/K/V biases, NEOX RoPE.
pub(super) const FLAVOR: Flavor = Flavor {
    rope_mode: RopeMode::Neox,
    qkv_bias: true,
    qk_norm: false,
};

/// Builds one step of a Qwen2 model.
pub fn build_step(c: &Hparams, f: &GgufFile, s: StepShape) -> Result<StepGraph, ModelError> {
    build_prenorm_decoder(c, f, s, FLAVOR)
}
