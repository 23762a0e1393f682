//! Errors of the GGUF reader and writer. Every parse error names what was being read and the byte
//! offset (from the start of the file) where it starts, or the tensor it belongs to.
//!
//! Messages already include their cause (an I/O error, the error inside a metadata value), so no
//! variant reports a `source()`: a printed error chain says each thing once.

use std::io;
use std::path::PathBuf;

/// Why a GGUF file could not be opened, parsed, queried or written.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read {}: {cause}", path.display())]
    Open { path: PathBuf, cause: io::Error },
    /// Writing a file failed.
    #[error("cannot write GGUF: {0}")]
    Write(io::Error),
    /// The first four bytes are not `GGUF`.
    #[error("bad magic {found:02x?} at offset 0: not a GGUF file (expected \"GGUF\")")]
    BadMagic { found: Vec<u8> },
    /// A version this reader does not handle.
    #[error("unsupported GGUF version {version}: {why}")]
    UnsupportedVersion { version: u32, why: &'static str },
    /// The file ends in the middle of an item.
    #[error("truncated file: {what} at offset {offset} needs {need} bytes, only {have} left")]
    Truncated {
        what: &'static str,
        offset: u64,
        need: u64,
        have: u64,
    },
    /// A count or length that cannot possibly fit in the bytes that remain.
    #[error("{what} {count} at offset {offset} cannot fit in the {remaining} bytes left (each takes at least {min_each})")]
    ImplausibleCount {
        what: &'static str,
        count: u64,
        offset: u64,
        remaining: u64,
        min_each: u64,
    },
    /// Arrays of arrays nested deeper than [`crate::MAX_ARRAY_DEPTH`].
    #[error("array at offset {offset} is nested deeper than {max} levels")]
    TooDeep { offset: u64, max: usize },
    /// A string that is not UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    Utf8 { what: &'static str, offset: u64 },
    /// A metadata value type id outside the spec's `gguf_metadata_value_type`.
    #[error("unknown metadata value type {id} at offset {offset}")]
    UnknownValueType { id: u32, offset: u64 },
    /// A bool byte other than 0 or 1.
    #[error("invalid bool byte {byte} at offset {offset} (must be 0 or 1)")]
    InvalidBool { byte: u8, offset: u64 },
    /// A metadata key longer than the spec allows.
    #[error("metadata key at offset {offset} is {len} bytes long, at most {max} allowed")]
    KeyTooLong { len: usize, offset: u64, max: usize },
    /// The same metadata key twice.
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey { key: String, offset: u64 },
    /// An error inside the value of one metadata key.
    #[error("metadata key {key:?}: {error}")]
    InKey { key: String, error: Box<GgufError> },
    /// `general.alignment` is not a power of two (or not an unsigned integer).
    #[error("invalid general.alignment: {what}")]
    BadAlignment { what: String },
    /// The same tensor name twice.
    #[error("duplicate tensor name {name:?} at offset {offset}")]
    DuplicateTensor { name: String, offset: u64 },
    /// A tensor whose description (name, dims, type, size) is invalid.
    #[error("tensor {name:?} (info at offset {offset}): {what}")]
    BadTensor {
        name: String,
        offset: u64,
        what: String,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error(
        "tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        name: String,
        offset: u64,
        alignment: u64,
    },
    /// Tensor data that reaches past the end of the file.
    #[error("tensor {name:?}: data at file bytes {start}..{end} reaches past the end of the file ({file_len} bytes)")]
    TensorPastEnd {
        name: String,
        start: u64,
        end: u64,
        file_len: u64,
    },
    /// Two tensors that share bytes.
    #[error("tensors {first:?} (data offsets {first_start}..{first_end}) and {second:?} (from {second_start}) overlap")]
    OverlappingTensors {
        first: String,
        first_start: u64,
        first_end: u64,
        second: String,
        second_start: u64,
    },
    /// A model split over several files (`-00001-of-00003.gguf`) whose parts do not fit
    /// together: a part missing or partly downloaded, out of place, or a tensor in two parts.
    #[error("split model {}: {why}", path.display())]
    Split { path: PathBuf, why: String },
    /// A tensor that does not belong to this file.
    #[error("tensor {name:?} does not belong to this file")]
    ForeignTensor { name: String },
    /// Tensor data of a file that was streamed past, not kept.
    #[error("tensor {name:?}: the file was streamed and its tensor data is not held in memory")]
    NotHeld { name: String },
    /// A stream that gave more or fewer bytes than it announced.
    #[error("the stream gave {got} bytes{}, but announced {announced}", if *.ended { "" } else { " so far" })]
    StreamLength {
        announced: u64,
        got: u64,
        ended: bool,
    },
    /// A stream used after it returned an error.
    #[error("the GGUF stream already failed; start a new one")]
    StreamFailed,
    /// A header that would take more memory than a streamed load allows.
    #[error("the GGUF header needs more than {max} bytes (at offset {need}): too large to buffer while streaming")]
    HeaderTooLarge { need: u64, max: u64 },
    /// A metadata key that is absent.
    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },
    /// A metadata key whose value has the wrong type or does not fit the requested one.
    #[error("metadata key {key:?} holds {found}, expected {expected}")]
    KeyType {
        key: String,
        expected: &'static str,
        found: String,
    },
    /// The writer was given something it cannot write as valid GGUF.
    #[error("cannot write GGUF: {what}")]
    InvalidWrite { what: String },
}

impl GgufError {
    /// Wraps an error raised inside the value of metadata key `key`.
    pub(crate) fn in_key(self, key: &str) -> GgufError {
        GgufError::InKey {
            key: key.to_owned(),
            error: Box::new(self),
        }
    }
}
