//! [`GgufWriter`]: writes GGUF v3 files, laid out as ggml's `gguf_write_to_buf` does.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>. The header is followed by
//! zero padding up to the alignment; each tensor's data starts aligned and is followed by zero
//! padding up to the alignment (the last one too, as ggml writes it). Everything the reader
//! rejects is refused when added, so a written file always reads back.

use std::collections::HashSet;
use std::io::Write;

use bytes::Bytes;
use indexmap::IndexMap;
use wgllm_core::{DType, Layout};

use crate::error::GgufError;
use crate::value::{Array, Value};
use crate::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_KEY_LEN};
use crate::{MAX_TENSOR_NAME_LEN, VERSION};

type Result<T, E = GgufError> = std::result::Result<T, E>;

fn invalid(what: String) -> GgufError {
    GgufError::InvalidWrite { what }
}

/// A tensor waiting to be written.
#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    data: Bytes,
}

/// Collects metadata and tensors, then writes them as one GGUF v3 file.
///
/// ```
/// use wgllm_core::DType;
/// use wgllm_gguf::{GgufFile, GgufWriter, Value};
///
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", Value::String("llama".into()))?;
/// let data: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// w.add_tensor("x", DType::F32, &[3], data)?;
/// let file = GgufFile::from_bytes(w.to_vec().into())?;
/// assert_eq!(file.architecture()?, "llama");
/// # Ok::<(), wgllm_gguf::GgufError>(())
/// ```
#[derive(Clone, Debug)]
pub struct GgufWriter {
    alignment: u64,
    metadata: IndexMap<String, Value>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty file with the default alignment of 32.
    pub fn new() -> GgufWriter {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            metadata: IndexMap::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// A writer holding `file`'s metadata with the pairs of `set` added (or replacing those of
    /// the same key), and its tensors (sharing the file's bytes): a model with its metadata
    /// edited.
    pub fn with_metadata(
        file: &crate::GgufFile,
        set: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<GgufWriter> {
        let mut metadata = file.metadata().clone();
        metadata.extend(set);
        let mut w = GgufWriter::new();
        for (k, v) in metadata {
            w.add_metadata(k, v)?;
        }
        for t in file.tensors() {
            w.add_tensor(t.name(), t.dtype(), t.shape(), file.tensor_bytes(t)?)?;
        }
        Ok(w)
    }

    /// Adds a metadata pair. `general.alignment` must be a u32 power of two and sets the alignment
    /// the tensors are written with.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: Value) -> Result<&mut Self> {
        let key = key.into();
        if key.len() > MAX_KEY_LEN {
            return Err(invalid(format!(
                "metadata key of {} bytes, at most {MAX_KEY_LEN} allowed",
                key.len()
            )));
        }
        if self.metadata.contains_key(&key) {
            return Err(invalid(format!("duplicate metadata key {key:?}")));
        }
        if let Value::Array(a) = &value {
            if array_depth(a) > MAX_ARRAY_DEPTH {
                return Err(invalid(format!(
                    "{key:?}: arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
                )));
            }
        }
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a.into(),
                _ => {
                    return Err(invalid(format!(
                        "{ALIGNMENT_KEY} must be a u32 power of two, got {} {value}",
                        value.type_description()
                    )))
                }
            }
        }
        self.metadata.insert(key, value);
        Ok(self)
    }

    /// Adds a tensor of `dtype` with extents `shape` (innermost first, 1 to 4 of them) whose
    /// contiguous bytes are `data`.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[u64],
        data: impl Into<Bytes>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let data = data.into();
        if name.len() > MAX_TENSOR_NAME_LEN {
            return Err(invalid(format!(
                "tensor name {name:?} is {} bytes long, at most {MAX_TENSOR_NAME_LEN} allowed",
                name.len()
            )));
        }
        if self.names.contains(&name) {
            return Err(invalid(format!("duplicate tensor name {name:?}")));
        }
        if shape.is_empty() || shape.len() > MAX_DIMS || shape.contains(&0) {
            return Err(invalid(format!(
                "tensor {name:?}: shape {shape:?} must have 1 to {MAX_DIMS} non-zero extents"
            )));
        }
        let mut ne = [1u64; MAX_DIMS];
        ne[..shape.len()].copy_from_slice(shape);
        let size = Layout::contiguous(dtype, ne)
            .ok()
            .and_then(|l| l.nb[3].checked_mul(ne[3]))
            .ok_or_else(|| {
                invalid(format!(
                    "tensor {name:?}: shape {shape:?} is not whole {dtype} blocks per row or overflows"
                ))
            })?;
        if data.len() as u64 != size {
            return Err(invalid(format!(
                "tensor {name:?}: {dtype} {shape:?} takes {size} bytes, data has {}",
                data.len()
            )));
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dtype,
            shape: shape.to_vec(),
            data,
        });
        Ok(self)
    }

    /// Padding after `len` bytes to reach the alignment.
    fn pad(&self, len: u64) -> usize {
        // The alignment is a power of two of at most 2^31; the result is below it.
        (len.next_multiple_of(self.alignment) - len) as usize
    }

    /// The header up to and including the padding before the data section.
    fn header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.dtype.gguf_id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            let len = t.data.len() as u64;
            offset += len + self.pad(len) as u64;
        }
        out.resize(out.len() + self.pad(out.len() as u64), 0);
        out
    }

    /// Writes the file to `w`.
    pub fn write_to(&self, mut w: impl Write) -> Result<()> {
        let mut write = || -> std::io::Result<()> {
            w.write_all(&self.header())?;
            let zeros = vec![0u8; self.pad(1)];
            for t in &self.tensors {
                w.write_all(&t.data)?;
                w.write_all(&zeros[..self.pad(t.data.len() as u64)])?;
            }
            w.flush()
        };
        write().map_err(GgufError::Write)
    }

    /// The whole file in memory.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = self.header();
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(out.len() + self.pad(t.data.len() as u64), 0);
        }
        out
    }
}

/// Levels of arrays in `a`, itself included.
fn array_depth(a: &Array) -> usize {
    match a {
        Array::Array(inner) => 1 + inner.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.elem_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => le!(v),
        Array::U16(v) => le!(v),
        Array::I16(v) => le!(v),
        Array::U32(v) => le!(v),
        Array::I32(v) => le!(v),
        Array::F32(v) => le!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
        Array::U64(v) => le!(v),
        Array::I64(v) => le!(v),
        Array::F64(v) => le!(v),
    }
}
