//! wgllm-speech: speech to text with Whisper on the graph engine — audio files decoded and
//! resampled (`audio`), the log-mel front end (`mel`), whisper.cpp's model files and their GGUF
//! form (`model`, `ggml_bin`), the encoder and decoder graphs (`graph`), whisper.cpp's decoding
//! (`decode`), a compiled model (`transcribe`) and the subtitle formats (`format`).

pub mod audio;
#[cfg(not(target_arch = "wasm32"))]
pub mod ct2;
pub mod decode;
pub mod error;
pub mod format;
pub mod ggml_bin;
pub mod graph;
pub mod lang;
pub mod mel;
pub mod model;
#[cfg(not(target_arch = "wasm32"))]
pub mod open;
#[cfg(not(target_arch = "wasm32"))]
pub mod pull;
pub mod synth;
pub mod transcribe;

pub use audio::Audio;
pub use decode::{DecodeOptions, Segment, Transcript};
pub use error::SpeechError;
pub use model::WhisperModel;
pub use transcribe::Transcriber;
