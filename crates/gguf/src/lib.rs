//! wgllm-gguf: a validating reader and a writer for GGUF files.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>. Versions 2 and 3 are read
//! (little-endian only); version 3 is written. A file is a header (magic `GGUF`, version, tensor
//! and metadata counts), typed key/value metadata, tensor infos, then the tensor data section,
//! which starts at the header's end rounded up to `general.alignment` (default 32).
//!
//! [`GgufFile::open`] maps the file and [`GgufFile::from_bytes`] parses bytes already in memory;
//! both validate everything before returning (see [`GgufError`] for what is rejected), so a
//! truncated, corrupt or hostile file is an error, never a panic or a huge allocation. Tensor data
//! comes out as `&[u8]` or as [`bytes::Bytes`] sharing the mapping, without copies.
//!
//! [`GgufStream`] reads a file from chunks as they arrive (a browser's `fetch` body): the same
//! parser and checks, the header buffered until complete, then each tensor's data handed on in
//! pieces and not kept.
//!
//! [`GgufWriter`] writes v3 files, for tests and synthetic models.

mod error;
mod file;
mod reader;
#[cfg(not(target_arch = "wasm32"))]
pub mod split;
mod stream;
mod value;
mod writer;

pub use error::GgufError;
#[cfg(not(target_arch = "wasm32"))]
pub use file::in_use;
pub use file::{GgufFile, TensorInfo};
pub use stream::{GgufStream, StreamEvent, MAX_STREAMED_HEADER};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;

/// The first four bytes of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The version [`GgufWriter`] writes.
pub const VERSION: u32 = 3;
/// The metadata key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = wgllm_core::layout::MAX_DIMS;
/// Longest tensor name, in bytes, that the spec allows.
pub const MAX_TENSOR_NAME_LEN: usize = 64;
/// Longest metadata key, in bytes, that the spec allows.
pub const MAX_KEY_LEN: usize = 65_535;
/// Deepest nesting of arrays of arrays we accept (the spec sets none; real files use at most 1).
pub const MAX_ARRAY_DEPTH: usize = 8;
