//! The GGUF parser: header, metadata, tensor infos, and every validation of them.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>. Everything is little-endian.
//! Nothing here trusts a count or length from the file: each one is checked against the bytes
//! left before anything is allocated for it, and every size computation is checked. Parsed
//! metadata takes at most about 3× the bytes it was read from (an 8-byte empty string becomes a
//! 24-byte `String`, a 12-byte empty array a 32-byte [`Array`]), so a hostile file cannot make the
//! reader allocate much more than its own size; arrays nest at most [`MAX_ARRAY_DEPTH`] deep, so
//! recursion is bounded too.
//!
//! One parser serves the whole-file reader ([`parse`]) and the streaming one
//! ([`crate::GgufStream`]): [`HeaderParser`] parses item by item (the preamble, each metadata
//! pair, each tensor info) from the bytes available so far. An item that runs past them is not
//! an error while the file goes on: the parser keeps what it has and says how many bytes the
//! item needs, and parses it again from its start once they are there.

use std::collections::HashMap;

use indexmap::IndexMap;
use wgllm_core::{DType, Layout};

use crate::error::GgufError;
use crate::value::{Array, Value, ValueType};
use crate::{TensorInfo, MAX_TENSOR_NAME_LEN};
use crate::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_KEY_LEN};

type Result<T, E = GgufError> = std::result::Result<T, E>;

/// Fewest bytes one metadata pair takes: key length, value type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes one tensor info takes: name length, n_dims, one dimension, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// Everything the header describes, validated against a file of `file_len` bytes.
pub(crate) struct Header {
    pub version: u32,
    pub metadata: IndexMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// A position in the file being parsed, of which the first `buf.len()` bytes are at hand.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Length of the whole file (`u64::MAX` while a stream has not said): counts and lengths
    /// are checked against it, and reading past it is [`GgufError::Truncated`].
    len: u64,
    /// Set when a read went past `buf` but not past the file: the file offset the read needs.
    /// The error returned then only unwinds the item being parsed.
    short: Option<u64>,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes of the file after the cursor, at hand or not.
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.offset())
    }

    /// The next `n` bytes.
    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let offset = self.offset();
        let truncated = |have| GgufError::Truncated {
            what,
            offset,
            need: n,
            have,
        };
        if n > self.remaining() {
            return Err(truncated(self.remaining()));
        }
        let at_hand = (self.buf.len() - self.pos) as u64;
        if n > at_hand {
            self.short = Some(offset + n);
            return Err(truncated(at_hand));
        }
        // `n <= at_hand`, which is a usize, so the cast is exact.
        let end = self.pos + n as usize;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Fails when `count` items of at least `min_each` bytes cannot fit in the bytes left.
    fn check_count(&self, what: &'static str, count: u64, min_each: u64, at: u64) -> Result<()> {
        let fits = count
            .checked_mul(min_each)
            .is_some_and(|need| need <= self.remaining());
        if fits {
            Ok(())
        } else {
            Err(GgufError::ImplausibleCount {
                what,
                count,
                offset: at,
                remaining: self.remaining(),
                min_each,
            })
        }
    }

    /// A `gguf_string_t`: u64 length, then that many bytes of UTF-8 (no terminator).
    fn string(&mut self, what: &'static str) -> Result<String> {
        let at = self.offset();
        let len = self.u64(what)?;
        self.check_count("string length", len, 1, at)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::Utf8 { what, offset: at })
    }

    /// `count` fixed-size little-endian values of `N` bytes each.
    fn fixed<const N: usize, T>(&mut self, count: u64, from: fn([u8; N]) -> T) -> Result<Vec<T>> {
        let total = count.saturating_mul(N as u64);
        let bytes = self.take(total, "array elements")?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                from(a)
            })
            .collect())
    }

    fn value_type(&mut self, what: &'static str) -> Result<ValueType> {
        let at = self.offset();
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or(GgufError::UnknownValueType { id, offset: at })
    }

    fn bool(&mut self) -> Result<bool> {
        let at = self.offset();
        match self.array::<1>("bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(GgufError::InvalidBool { byte, offset: at }),
        }
    }

    /// One value of type `ty`.
    fn value(&mut self, ty: ValueType) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array("u8 value").map(u8::from_le_bytes)?),
            ValueType::I8 => Value::I8(self.array("i8 value").map(i8::from_le_bytes)?),
            ValueType::U16 => Value::U16(self.array("u16 value").map(u16::from_le_bytes)?),
            ValueType::I16 => Value::I16(self.array("i16 value").map(i16::from_le_bytes)?),
            ValueType::U32 => Value::U32(self.u32("u32 value")?),
            ValueType::I32 => Value::I32(self.array("i32 value").map(i32::from_le_bytes)?),
            ValueType::F32 => Value::F32(self.array("f32 value").map(f32::from_le_bytes)?),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::Array => Value::Array(self.array_value(1)?),
            ValueType::U64 => Value::U64(self.u64("u64 value")?),
            ValueType::I64 => Value::I64(self.array("i64 value").map(i64::from_le_bytes)?),
            ValueType::F64 => Value::F64(self.array("f64 value").map(f64::from_le_bytes)?),
        })
    }

    /// An array (element type, u64 count, elements); `depth` counts the arrays it sits in, itself
    /// included.
    fn array_value(&mut self, depth: usize) -> Result<Array> {
        let at = self.offset();
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::TooDeep {
                offset: at,
                max: MAX_ARRAY_DEPTH,
            });
        }
        let ty = self.value_type("array element type")?;
        let count_at = self.offset();
        let n = self.u64("array length")?;
        self.check_count("array length", n, ty.min_size(), count_at)?;
        Ok(match ty {
            ValueType::U8 => Array::U8(self.fixed(n, u8::from_le_bytes)?),
            ValueType::I8 => Array::I8(self.fixed(n, i8::from_le_bytes)?),
            ValueType::U16 => Array::U16(self.fixed(n, u16::from_le_bytes)?),
            ValueType::I16 => Array::I16(self.fixed(n, i16::from_le_bytes)?),
            ValueType::U32 => Array::U32(self.fixed(n, u32::from_le_bytes)?),
            ValueType::I32 => Array::I32(self.fixed(n, i32::from_le_bytes)?),
            ValueType::F32 => Array::F32(self.fixed(n, f32::from_le_bytes)?),
            ValueType::U64 => Array::U64(self.fixed(n, u64::from_le_bytes)?),
            ValueType::I64 => Array::I64(self.fixed(n, i64::from_le_bytes)?),
            ValueType::F64 => Array::F64(self.fixed(n, f64::from_le_bytes)?),
            ValueType::Bool => Array::Bool((0..n).map(|_| self.bool()).collect::<Result<_>>()?),
            ValueType::String => Array::String(
                (0..n)
                    .map(|_| self.string("array string"))
                    .collect::<Result<_>>()?,
            ),
            ValueType::Array => Array::Array(
                (0..n)
                    .map(|_| self.array_value(depth + 1))
                    .collect::<Result<_>>()?,
            ),
        })
    }

    /// One tensor info: name, n_dims, dims, ggml type, data offset; validated on its own.
    fn tensor_info(&mut self) -> Result<TensorInfo> {
        let at = self.offset();
        let name = self.string("tensor name")?;
        let bad = |what: String| GgufError::BadTensor {
            name: name.clone(),
            offset: at,
            what,
        };
        if name.len() > MAX_TENSOR_NAME_LEN {
            return Err(bad(format!(
                "name is {} bytes long, at most {MAX_TENSOR_NAME_LEN} allowed",
                name.len()
            )));
        }
        let n_dims = self.u32("tensor n_dims")?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(bad(format!("{n_dims} dimensions, must be 1 to {MAX_DIMS}")));
        }
        let mut ne = [1u64; MAX_DIMS];
        for (i, d) in ne.iter_mut().enumerate().take(n_dims as usize) {
            *d = self.u64("tensor dimension")?;
            if *d == 0 {
                return Err(bad(format!("dimension {i} is zero")));
            }
        }
        let id = self.u32("tensor type")?;
        let dtype =
            DType::from_gguf_id(id).ok_or_else(|| bad(format!("unknown ggml type id {id}")))?;
        let offset = self.u64("tensor data offset")?;
        let block = dtype.block_size() as u64;
        if ne[0] % block != 0 {
            return Err(bad(format!(
                "ne[0] = {} is not a multiple of the {dtype} block size {block}",
                ne[0]
            )));
        }
        let overflow = || {
            bad(format!(
                "shape {:?} of {dtype} overflows u64",
                &ne[..n_dims as usize]
            ))
        };
        let nelements = ne
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(overflow)?;
        let layout = Layout::contiguous(dtype, ne).map_err(|_| overflow())?;
        let size = layout.nb[3].checked_mul(ne[3]).ok_or_else(overflow)?;
        Ok(TensorInfo {
            name,
            dtype,
            n_dims: n_dims as usize,
            layout,
            nelements,
            offset,
            size,
            part: 0,
        })
    }
}

/// `general.alignment` if present, validated; [`DEFAULT_ALIGNMENT`] otherwise.
fn alignment(metadata: &IndexMap<String, Value>) -> Result<u64> {
    let Some(v) = metadata.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let a = v.to_u32().ok_or_else(|| GgufError::BadAlignment {
        what: format!("{} {v} is not a u32", v.type_description()),
    })?;
    if !a.is_power_of_two() {
        return Err(GgufError::BadAlignment {
            what: format!("{a} is not a non-zero power of two"),
        });
    }
    Ok(a.into())
}

/// Where a [`HeaderParser`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Magic, version and the two counts.
    Preamble,
    /// This many metadata pairs left.
    Metadata(u64),
    /// This many tensor infos left.
    Tensors(u64),
    Done,
}

/// The header parsed item by item from the first bytes of a file (see the module docs).
pub(crate) struct HeaderParser {
    stage: Stage,
    /// File offset where the next item starts.
    pos: usize,
    version: u32,
    tensor_count: u64,
    metadata: IndexMap<String, Value>,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
}

impl HeaderParser {
    pub(crate) fn new() -> HeaderParser {
        HeaderParser {
            stage: Stage::Preamble,
            pos: 0,
            version: 0,
            tensor_count: 0,
            metadata: IndexMap::new(),
            tensors: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// File offset where the item being parsed starts (the header's end once complete).
    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Parses every item that `avail`, the first bytes of a file of `file_len` bytes (`None`:
    /// not known yet), completes. `Ok(None)`: the header is complete; `Ok(Some(end))`: the next
    /// item needs the file's bytes up to offset `end`. With `avail` the whole file it never
    /// asks for more.
    pub(crate) fn advance(&mut self, avail: &[u8], file_len: Option<u64>) -> Result<Option<u64>> {
        loop {
            let mut c = Cursor {
                buf: avail,
                pos: self.pos,
                len: file_len.unwrap_or(u64::MAX),
                short: None,
            };
            let next = match self.stage {
                Stage::Preamble => self.preamble(&mut c),
                Stage::Metadata(0) => Ok(Stage::Tensors(self.tensor_count)),
                Stage::Metadata(left) => self
                    .metadata_pair(&mut c)
                    .map(|()| Stage::Metadata(left - 1)),
                Stage::Tensors(0) => Ok(Stage::Done),
                Stage::Tensors(left) => self.tensor_info(&mut c).map(|()| Stage::Tensors(left - 1)),
                Stage::Done => return Ok(None),
            };
            match (next, c.short) {
                (_, Some(end)) => return Ok(Some(end)),
                (Err(e), None) => return Err(e),
                (Ok(stage), None) => {
                    self.stage = stage;
                    self.pos = c.pos;
                }
            }
        }
    }

    /// Magic, version, counts, and whether the counts can fit in the file.
    fn preamble(&mut self, c: &mut Cursor<'_>) -> Result<Stage> {
        if c.buf.len() < MAGIC.len() && !MAGIC.starts_with(c.buf) {
            return Err(GgufError::BadMagic {
                found: c.buf.to_vec(),
            });
        }
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let version = c.u32("version")?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(GgufError::UnsupportedVersion {
                    version,
                    why: "GGUF v1 used 32-bit counts and lengths; convert the file to v3 with a current llama.cpp",
                })
            }
            v if matches!(v.swap_bytes(), 2 | 3) => {
                return Err(GgufError::UnsupportedVersion {
                    version,
                    why: "this looks like a big-endian GGUF file, only little-endian files are supported",
                })
            }
            _ => {
                return Err(GgufError::UnsupportedVersion {
                    version,
                    why: "only versions 2 and 3 are supported",
                })
            }
        }
        let tensors_at = c.offset();
        let tensor_count = c.u64("tensor count")?;
        let kvs_at = c.offset();
        let kv_count = c.u64("metadata count")?;
        c.check_count("metadata count", kv_count, MIN_KV_BYTES, kvs_at)?;
        c.check_count(
            "tensor count",
            tensor_count,
            MIN_TENSOR_INFO_BYTES,
            tensors_at,
        )?;
        // Both fit on their own; together they must fit too.
        let both = (kv_count * MIN_KV_BYTES).checked_add(tensor_count * MIN_TENSOR_INFO_BYTES);
        if both.is_none_or(|b| b > c.remaining()) {
            return Err(GgufError::ImplausibleCount {
                what: "metadata and tensor counts",
                count: kv_count.saturating_add(tensor_count),
                offset: tensors_at,
                remaining: c.remaining(),
                min_each: MIN_KV_BYTES.min(MIN_TENSOR_INFO_BYTES),
            });
        }
        self.version = version;
        self.tensor_count = tensor_count;
        Ok(Stage::Metadata(kv_count))
    }

    /// One metadata key and value.
    fn metadata_pair(&mut self, c: &mut Cursor<'_>) -> Result<()> {
        let at = c.offset();
        let key = c.string("metadata key")?;
        if key.len() > MAX_KEY_LEN {
            return Err(GgufError::KeyTooLong {
                len: key.len(),
                offset: at,
                max: MAX_KEY_LEN,
            });
        }
        if self.metadata.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key, offset: at });
        }
        let value = c
            .value_type("metadata value type")
            .and_then(|ty| c.value(ty))
            .map_err(|e| e.in_key(&key))?;
        self.metadata.insert(key, value);
        Ok(())
    }

    /// One tensor info, whose name must be new.
    fn tensor_info(&mut self, c: &mut Cursor<'_>) -> Result<()> {
        let at = c.offset();
        let t = c.tensor_info()?;
        if self.index.contains_key(&t.name) {
            return Err(GgufError::DuplicateTensor {
                name: t.name,
                offset: at,
            });
        }
        // Fewer tensors than `tensor_count`, which fits in memory (checked), so a usize.
        self.index.insert(t.name.clone(), self.tensors.len());
        self.tensors.push(t);
        Ok(())
    }

    /// The complete header: alignment, data offset, and tensor extents checked against a file
    /// of `file_len` bytes (`None`: only alignment and overlaps, the length is not known yet).
    pub(crate) fn finish(self, file_len: Option<u64>) -> Result<Header> {
        if self.stage != Stage::Done {
            return Err(GgufError::Truncated {
                what: "header",
                offset: self.pos(),
                need: 1,
                have: 0,
            });
        }
        let alignment = alignment(&self.metadata)?;
        let data_offset = self
            .pos()
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| GgufError::BadAlignment {
                what: format!("{alignment} overflows the data section offset"),
            })?;
        check_extents(&self.tensors, alignment, data_offset, file_len)?;
        Ok(Header {
            version: self.version,
            metadata: self.metadata,
            tensors: self.tensors,
            index: self.index,
            alignment,
            data_offset,
        })
    }
}

/// Parses and validates the header of the GGUF file `buf` (the whole file: tensor extents are
/// checked against its length).
pub(crate) fn parse(buf: &[u8]) -> Result<Header> {
    let mut p = HeaderParser::new();
    let len = Some(buf.len() as u64);
    // The whole file is at hand, so no item asks for more: `finish` sees a complete header.
    p.advance(buf, len)?;
    p.finish(len)
}

/// Every tensor aligned, inside the file, and no two overlapping.
fn check_extents(
    tensors: &[TensorInfo],
    alignment: u64,
    data_offset: u64,
    file_len: Option<u64>,
) -> Result<()> {
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                name: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        match (start, end) {
            (Some(_), Some(end)) if file_len.is_none_or(|len| end <= len) => {}
            _ => {
                return Err(GgufError::TensorPastEnd {
                    name: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len: file_len.unwrap_or(u64::MAX),
                })
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // In bounds (checked above), so `offset + size` cannot overflow.
        if a.offset + a.size > b.offset {
            return Err(GgufError::OverlappingTensors {
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a.offset + a.size,
                second: b.name.clone(),
                second_start: b.offset,
            });
        }
    }
    Ok(())
}
