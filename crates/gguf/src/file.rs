//! [`GgufFile`]: a parsed, validated GGUF file over shared bytes (usually a memory map).

use std::collections::HashMap;
#[cfg(not(target_arch = "wasm32"))]
use std::fs::File;
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

use bytes::Bytes;
use indexmap::IndexMap;
#[cfg(not(target_arch = "wasm32"))]
use memmap2::Mmap;
use wgllm_core::{DType, Layout};

use crate::error::GgufError;
use crate::reader;
use crate::value::{Array, Value};

type Result<T, E = GgufError> = std::result::Result<T, E>;

/// One tensor's description from the header, validated: 1 to 4 non-zero dimensions, a known
/// dtype, whole blocks per row, a size that fits u64 and data inside the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    pub(crate) n_dims: usize,
    pub(crate) layout: Layout,
    pub(crate) nelements: u64,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    /// The part of a split model whose data section holds the tensor (0: the first file).
    pub(crate) part: usize,
}

impl TensorInfo {
    /// The tensor's name (`"blk.0.attn_q.weight"`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Extents as stored in the file, innermost (`ne[0]`) first, 1 to 4 of them.
    pub fn shape(&self) -> &[u64] {
        &self.layout.ne[..self.n_dims]
    }

    /// The contiguous layout of the data (4-D; missing outer extents are 1).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Number of elements.
    pub fn nelements(&self) -> u64 {
        self.nelements
    }

    /// Offset of the data from the start of the data section, as stored in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of data.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// A parsed GGUF file. Metadata keeps file order; tensor data stays in the shared bytes, or is
/// not held at all when the file was streamed past ([`crate::GgufStream`]): then only the
/// header is here and [`GgufFile::tensor_data`] refuses.
#[derive(Clone, Debug)]
pub struct GgufFile {
    /// The whole file; `None` when streamed.
    bytes: Option<Bytes>,
    file_len: u64,
    version: u32,
    metadata: IndexMap<String, Value>,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    /// The later files of a split model: their bytes and data sections' offsets.
    parts: Vec<(Bytes, u64)>,
}

/// A file's mapping with the file itself, whose shared lock lasts as long as the mapping.
#[cfg(not(target_arch = "wasm32"))]
struct Mapped {
    map: Mmap,
    _file: File,
}

#[cfg(not(target_arch = "wasm32"))]
impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

/// Whether a process holds `path` open as a model ([`GgufFile::open`]'s shared lock), checked
/// by taking the exclusive lock for a moment. `false` also where the file system has no locks.
#[cfg(not(target_arch = "wasm32"))]
pub fn in_use(path: &Path) -> std::io::Result<bool> {
    let file = File::open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(_)) => Ok(false),
    }
}

impl GgufFile {
    /// One file, mapped and parsed.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn open_one(path: &Path) -> Result<GgufFile> {
        let open_err = |cause| GgufError::Open {
            path: path.to_owned(),
            cause,
        };
        let file = File::open(path).map_err(open_err)?;
        // SAFETY: the mapping is read-only. It is undefined behaviour if another process truncates
        // or rewrites the file while it is mapped; like every mmap-based model loader (llama.cpp,
        // candle) we accept that model files are not modified while in use.
        let map = unsafe { Mmap::map(&file) }.map_err(open_err)?;
        // A shared advisory lock while any of the bytes live, so that `wgllm rm` sees the file
        // in use; a file system without locks only loses that check.
        let _ = file.try_lock_shared();
        GgufFile::from_bytes(Bytes::from_owner(Mapped { map, _file: file }))
    }

    /// Parses a whole GGUF file held in `bytes` (tests, the browser, data read from a network).
    pub fn from_bytes(bytes: Bytes) -> Result<GgufFile> {
        let h = reader::parse(&bytes)?;
        let file_len = bytes.len() as u64;
        Ok(GgufFile::from_header(h, Some(bytes), file_len))
    }

    /// The file of header `h`, with the file's bytes if they are held.
    pub(crate) fn from_header(h: reader::Header, bytes: Option<Bytes>, file_len: u64) -> GgufFile {
        GgufFile {
            bytes,
            file_len,
            version: h.version,
            metadata: h.metadata,
            tensors: h.tensors,
            index: h.index,
            alignment: h.alignment,
            data_offset: h.data_offset,
            parts: Vec::new(),
        }
    }

    /// Sets the length of a streamed file once its stream has ended.
    pub(crate) fn set_file_len(&mut self, len: u64) {
        self.file_len = len;
    }

    /// Whether the tensor data is held ([`GgufFile::open`], [`GgufFile::from_bytes`]) rather than
    /// streamed past ([`crate::GgufStream`]).
    pub fn holds_tensor_data(&self) -> bool {
        self.bytes.is_some()
    }

    /// The file's format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment: `general.alignment`, or 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// File offset where the tensor data section starts.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Adds the tensors of `part`, the next file of a split model, to this one's.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn add_part(&mut self, part: GgufFile) -> std::result::Result<(), String> {
        let idx = self.parts.len() + 1;
        let bytes = part.bytes.ok_or("its tensor data is not held")?;
        for mut t in part.tensors {
            if self.index.contains_key(&t.name) {
                return Err(format!("tensor {:?} is in an earlier part too", t.name));
            }
            t.part = idx;
            self.index.insert(t.name.clone(), self.tensors.len());
            self.tensors.push(t);
        }
        self.parts.push((bytes, part.data_offset));
        self.file_len += part.file_len;
        Ok(())
    }

    /// The number of files the model is split over (1 for most).
    pub fn split_count(&self) -> usize {
        1 + self.parts.len()
    }

    /// Size of the whole file in bytes, of all its parts for a split model (of a streamed file: the length announced, or the bytes
    /// fed so far while the stream has not ended).
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &IndexMap<String, Value> {
        &self.metadata
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// The file's bytes and the byte range of `t`'s data in them; fails when `t` is not one of
    /// this file's tensors or the file was streamed.
    fn range(&self, t: &TensorInfo) -> Result<(&Bytes, std::ops::Range<usize>)> {
        if self.tensor(&t.name) != Some(t) {
            return Err(GgufError::ForeignTensor {
                name: t.name.clone(),
            });
        }
        let (bytes, data_offset) = match t.part {
            0 => (self.bytes.as_ref(), self.data_offset),
            p => match self.parts.get(p - 1) {
                Some((b, off)) => (Some(b), *off),
                None => (None, 0),
            },
        };
        let bytes = bytes.ok_or_else(|| GgufError::NotHeld {
            name: t.name.clone(),
        })?;
        // Validated at parse time: `data_offset + offset + size <= file_len`, a usize.
        let start = (data_offset + t.offset) as usize;
        Ok((bytes, start..start + t.size as usize))
    }

    /// The raw bytes of tensor `t`.
    pub fn tensor_data(&self, t: &TensorInfo) -> Result<&[u8]> {
        let (bytes, r) = self.range(t)?;
        Ok(&bytes[r])
    }

    /// The raw bytes of tensor `t` as [`Bytes`] sharing the file's storage (no copy).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> Result<Bytes> {
        let (bytes, r) = self.range(t)?;
        Ok(bytes.slice(r))
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T> {
        let v = self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })?;
        convert(v).ok_or_else(|| GgufError::KeyType {
            key: key.to_owned(),
            expected,
            found: match v {
                Value::String(_) | Value::Array(_) => v.type_description(),
                scalar => format!("{} {scalar}", v.type_description()),
            },
        })
    }

    /// An integer key of any stored width whose value fits u32.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.typed(key, "an unsigned integer that fits u32", Value::to_u32)
    }

    /// An integer key of any stored width whose value fits u64.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.typed(key, "an unsigned integer that fits u64", Value::to_u64)
    }

    /// An integer key of any stored width whose value fits i64.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.typed(key, "an integer that fits i64", Value::to_i64)
    }

    /// An f32 key (an f64 is accepted and rounded).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.typed(key, "a float", Value::to_f32)
    }

    /// A bool key.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.typed(key, "a bool", Value::as_bool)
    }

    /// A string key.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.typed(key, "a string", Value::as_str)
    }

    /// An array key.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        self.typed(key, "an array", Value::as_array)
    }

    /// `general.architecture` (`"llama"`, `"qwen2"`…), the prefix of the model's own keys.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }
}
