//! wgllm-models: what turns a GGUF file into an answering model — architectures built as graphs
//! (`arch`), sessions holding the KV cache (`session`), the model cache (`pull`).

pub mod ahead;
pub mod arch;
#[cfg(not(target_arch = "wasm32"))]
pub mod cache;
pub mod config;
#[cfg(not(target_arch = "wasm32"))]
pub mod convert;
pub mod embed;
pub mod embed_reference;
pub mod error;
pub mod generate;
#[cfg(not(target_arch = "wasm32"))]
pub mod hf;
#[cfg(not(target_arch = "wasm32"))]
pub mod hf_tag;
#[cfg(not(target_arch = "wasm32"))]
pub mod hub_cache;
#[cfg(not(target_arch = "wasm32"))]
mod net;
pub mod perplexity;
pub mod pull;
#[cfg(not(target_arch = "wasm32"))]
pub mod pypi;
pub mod reference;
pub mod sampler;
pub mod session;
pub mod stop;
pub mod synth;
pub mod tokenizer;

pub use arch::Architecture;
pub use embed::{EmbedConfig, Embedder, Truncate};
pub use error::ModelError;
pub use session::{NextToken, QueuedStep, Readback, RowOut, SeqChunk, Session, SessionConfig};
