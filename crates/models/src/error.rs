//! Errors of model loading and generation.

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model architecture '{name}'; supported: {supported}")]
    UnknownArchitecture { name: String, supported: String },
    #[error("'{0}' is an embedding model: it answers `wgllm embed` and /v1/embeddings, not text generation")]
    EmbeddingModel(String),
    /// Shown as the GGUF error itself (the CLI adds which file).
    #[error(transparent)]
    Gguf(#[from] wgllm_gguf::GgufError),
    #[error(transparent)]
    Graph(#[from] wgllm_core::Error),
    #[error("the model has no tensor '{0}'")]
    MissingTensor(String),
    #[error("tensor '{name}' has shape {got:?}, expected {want:?}")]
    TensorShape {
        name: String,
        got: Vec<u64>,
        want: Vec<u64>,
    },
    #[error("metadata '{key}' = {value} is not valid: {why}")]
    BadMetadata {
        key: String,
        value: String,
        why: String,
    },
    #[error("the prompt and generation need {need} tokens but the context holds {ctx} (raise --ctx, at most {max})")]
    ContextFull { need: usize, ctx: usize, max: usize },
    #[error("token id {0} is outside the vocabulary")]
    BadToken(u32),
    #[error("bad session use: {0}")]
    BadSession(String),
}
