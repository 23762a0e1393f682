//! A Whisper model from a path: whisper.cpp's `ggml-*.bin` (converted in memory) or a GGUF of
//! architecture `whisper`, told apart by the file's first bytes.

use std::path::Path;

use wgllm_gguf::GgufFile;

use crate::error::SpeechError;
use crate::ggml_bin::{is_ggml_bin, to_gguf};
use crate::model::WhisperModel;

/// Whether the file at `path` is a Whisper model: whisper.cpp's format, or a GGUF of
/// architecture `whisper` (only the header is read).
pub fn is_whisper_file(path: &Path) -> bool {
    let mut head = [0u8; 4];
    let read =
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
    if read.is_err() {
        return false;
    }
    if is_ggml_bin(&head) {
        return true;
    }
    GgufFile::open(path).is_ok_and(|f| f.architecture().is_ok_and(|a| a == "whisper"))
}

impl WhisperModel {
    /// Reads a GGUF file or a whisper.cpp `ggml-*.bin`.
    pub fn open(path: &Path) -> Result<WhisperModel, SpeechError> {
        let io = |err| SpeechError::Io {
            path: path.display().to_string(),
            err,
        };
        let mut head = [0u8; 4];
        {
            use std::io::Read;
            let mut fh = std::fs::File::open(path).map_err(io)?;
            fh.read_exact(&mut head).map_err(io)?;
        }
        let file = if is_ggml_bin(&head) {
            to_gguf(&std::fs::read(path).map_err(io)?)?
        } else {
            GgufFile::open(path)?
        };
        WhisperModel::from_gguf(file)
    }
}
