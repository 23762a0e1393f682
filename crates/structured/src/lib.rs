//! wgllm-structured: output held to a shape. A JSON schema, `json_object`, a GBNF or Lark
//! grammar or a regex becomes a [`Constraint`]: per generated token, the set of tokens that keep
//! the output inside the language (llguidance's Earley parser over the vocabulary's token trie),
//! applied to a step's logits before sampling. Tool calls (`tools`) are rendered, forced and
//! parsed in [`tools`].

mod constraint;
mod env;
pub mod gbnf;
pub mod request;
pub mod tools;

pub use constraint::{Constraint, Grammar, Grammars};

/// Why a grammar cannot be used or a constrained step cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum StructuredError {
    /// The grammar, schema or regex is malformed or beyond the engine's limits.
    #[error("{0}")]
    Grammar(String),
    /// The output can no longer follow the grammar (the engine's own error, or a token outside
    /// its mask).
    #[error("constrained decoding failed: {0}")]
    Decode(String),
}
