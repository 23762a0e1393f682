//! Why the engine could not do what was asked, one variant a cause.

use wgllm_models::ModelError;

/// Why the engine could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Device(#[from] wgllm_core::Error),
    #[error(transparent)]
    Gguf(#[from] wgllm_gguf::GgufError),
    #[error(transparent)]
    Tokenizer(#[from] wgllm_models::tokenizer::TokenizerError),
    #[error("no model is loaded")]
    NoModel,
    #[error(
        "the loaded model is an embedding model: it embeds texts (embed), it does not generate"
    )]
    NotGenerating,
    #[error("the loaded model generates text; embeddings need an embedding model (bert, Qwen3-Embedding...)")]
    NotEmbedding,
    #[error(transparent)]
    Speech(#[from] wgllm_speech::SpeechError),
    /// A grammar or schema that does not compile, or a reply it cannot continue.
    #[error(transparent)]
    Structured(#[from] wgllm_structured::StructuredError),
    #[error("the loaded model is not a Whisper model: transcription needs one (ggml-*.bin, or a GGUF of architecture whisper)")]
    NotSpeech,
    #[error("the loaded model is a Whisper speech model: it transcribes audio (transcribe)")]
    SpeechModel,
    #[error("no streamed load is in progress (begin_stream first)")]
    NoStream,
    /// Reading the stream itself failed (a network error, a cancelled download).
    #[error("reading the model stream: {0}")]
    Stream(String),
    /// The streamed file is not the one asked for (a changed or corrupted download or cache).
    #[error(
        "the model's sha256 is {got}, not the expected {expected}: the file changed or is corrupt"
    )]
    Checksum { expected: String, got: String },
    #[error("an expected sha256 must be 64 hexadecimal digits, not '{0}'")]
    BadChecksum(String),
    #[error("a context of {asked} tokens is out of range (1 to {max})")]
    BadContext { asked: usize, max: usize },
    /// The conversation (or prompt) and the answer asked for do not fit the context.
    #[error(
        "the conversation and the answer need {need} tokens but the context holds {ctx}: start \
         a new conversation, or ask for fewer tokens"
    )]
    ContextFull { need: usize, ctx: usize },
}
