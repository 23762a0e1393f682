//! Errors of speech recognition.

/// Why audio could not be read or a Whisper model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum SpeechError {
    /// The input is not audio this build decodes, or is empty or corrupt.
    #[error("audio: {0}")]
    Audio(String),
    #[error("the audio is longer than the limit of {max_seconds} s")]
    TooLong { max_seconds: f64 },
    #[error("not a Whisper model file: {0}")]
    BadModel(String),
    #[error("not a Whisper model ({0}): `transcribe` and /v1/audio need one (whisper.cpp's ggml-*.bin, or a GGUF of architecture 'whisper')")]
    NotWhisper(String),
    #[error("unknown language '{0}' (a code such as en, de, fr, or auto)")]
    UnknownLanguage(String),
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Model(#[from] wgllm_models::ModelError),
    #[error(transparent)]
    Gguf(#[from] wgllm_gguf::GgufError),
    #[error(transparent)]
    Graph(#[from] wgllm_core::Error),
    #[error("reading '{path}': {err}")]
    Io { path: String, err: std::io::Error },
}
