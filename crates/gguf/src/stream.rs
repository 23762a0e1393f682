//! [`GgufStream`]: a GGUF file parsed from its bytes as they arrive (a `fetch` body, a `File`'s
//! stream), handing each tensor's data on as it goes past instead of keeping it.
//!
//! The header is buffered and parsed by the same [`HeaderParser`] as
//! [`GgufFile::from_bytes`], item by item as chunks complete them; with the stream's length
//! announced, every check of the whole-file reader applies before the first tensor byte is
//! handed on. Once the header is complete the buffer goes, and the data section is cut into
//! pieces of tensor data ([`StreamEvent::Data`]): nothing of it is kept, so the consumer (a GPU
//! upload) decides what memory the data takes. The result is a [`GgufFile`] with the header only
//! ([`GgufFile::holds_tensor_data`] is false).

use crate::error::GgufError;
use crate::file::{GgufFile, TensorInfo};
use crate::reader::HeaderParser;

/// Most bytes a streamed header may take before it is refused (the largest real headers, with
/// 256k-token vocabularies and their merges, take about 10 MB).
pub const MAX_STREAMED_HEADER: u64 = 128 << 20;

/// What [`GgufStream::feed`] and [`GgufStream::finish`] hand on, in file order.
#[derive(Debug)]
pub enum StreamEvent<'a> {
    /// The header is complete: metadata, tensor infos and where the data section starts
    /// ([`GgufFile::data_offset`]). Comes once, before any `Data`.
    Header(&'a GgufFile),
    /// Bytes `offset .. offset + bytes.len()` of `tensor`'s data. Each tensor's bytes come once,
    /// in order, in one piece or several; tensors come in the order of their data offsets.
    Data {
        tensor: &'a TensorInfo,
        offset: u64,
        bytes: &'a [u8],
    },
}

enum Phase {
    /// The bytes so far, all header; parsed again once there are `retry_at` of them.
    Header {
        parser: HeaderParser,
        buf: Vec<u8>,
        retry_at: u64,
    },
    /// In the data section: `order` lists tensor indices by data offset, `next` is the first
    /// tensor not yet complete.
    Data {
        file: GgufFile,
        order: Vec<usize>,
        next: usize,
    },
    /// An error was returned; the stream takes nothing more.
    Failed,
}

/// A GGUF file being read from a stream of chunks.
pub struct GgufStream {
    total: Option<u64>,
    fed: u64,
    phase: Phase,
}

impl GgufStream {
    /// A stream of `total` bytes when known (a `Content-Length`, a `File`'s size): counts and
    /// tensor extents are then checked against it as soon as the header is parsed, and a stream
    /// longer or shorter than it is an error.
    pub fn new(total: Option<u64>) -> GgufStream {
        GgufStream {
            total,
            fed: 0,
            phase: Phase::Header {
                parser: HeaderParser::new(),
                buf: Vec::new(),
                retry_at: 0,
            },
        }
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// The announced length, if any.
    pub fn total(&self) -> Option<u64> {
        self.total
    }

    /// The header, once complete.
    pub fn header(&self) -> Option<&GgufFile> {
        match &self.phase {
            Phase::Data { file, .. } => Some(file),
            _ => None,
        }
    }

    /// Takes the next `chunk` of the file, handing `sink` the header once it is complete and
    /// every piece of tensor data the chunk holds. An error (the file's, or `sink`'s) ends the
    /// stream: later calls fail.
    pub fn feed<E: From<GgufError>>(
        &mut self,
        chunk: &[u8],
        mut sink: impl FnMut(StreamEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let r = self.feed_inner(chunk, &mut sink);
        if r.is_err() {
            self.phase = Phase::Failed;
        }
        r
    }

    fn feed_inner<E: From<GgufError>>(
        &mut self,
        chunk: &[u8],
        sink: &mut impl FnMut(StreamEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let at = self.fed;
        self.fed += chunk.len() as u64;
        if let Some(announced) = self.total.filter(|&t| self.fed > t) {
            return Err(GgufError::StreamLength {
                announced,
                got: self.fed,
                ended: false,
            }
            .into());
        }
        match &mut self.phase {
            Phase::Failed => Err(GgufError::StreamFailed.into()),
            Phase::Data { file, order, next } => walk(file, order, next, at, chunk, sink),
            Phase::Header { buf, retry_at, .. } => {
                buf.extend_from_slice(chunk);
                if (buf.len() as u64) < *retry_at {
                    return Ok(());
                }
                self.parse_header(sink, false)
            }
        }
    }

    /// Parses the buffered header further; once complete, hands on the header and the data
    /// bytes buffered after it. `ended`: the stream has ended, its length is the bytes fed.
    fn parse_header<E: From<GgufError>>(
        &mut self,
        sink: &mut impl FnMut(StreamEvent<'_>) -> Result<(), E>,
        ended: bool,
    ) -> Result<(), E> {
        let file_len = if ended { Some(self.fed) } else { self.total };
        let Phase::Header {
            parser,
            buf,
            retry_at,
        } = &mut self.phase
        else {
            return Ok(());
        };
        if let Some(need) = parser.advance(buf, file_len)? {
            if need > MAX_STREAMED_HEADER {
                return Err(GgufError::HeaderTooLarge {
                    need,
                    max: MAX_STREAMED_HEADER,
                }
                .into());
            }
            // The item is parsed again from its start: wait for the bytes it needs and for
            // twice the bytes this attempt had, so an item spread over many small chunks (a
            // vocabulary array) is parsed a few times, not once per chunk.
            let start = parser.pos();
            let tried = buf.len() as u64;
            let doubled = (start + 2 * (tried - start)).min(MAX_STREAMED_HEADER);
            *retry_at = need.max(doubled);
            return Ok(());
        }
        let Phase::Header { parser, buf, .. } = std::mem::replace(&mut self.phase, Phase::Failed)
        else {
            return Ok(());
        };
        let header = parser.finish(file_len)?;
        let file = GgufFile::from_header(header, None, self.total.unwrap_or(self.fed));
        let mut order: Vec<usize> = (0..file.tensors().len()).collect();
        order.sort_by_key(|&i| file.tensors()[i].offset());
        sink(StreamEvent::Header(&file))?;
        let mut next = 0;
        // The buffer starts at file offset 0; its header bytes precede every tensor.
        walk(&file, &order, &mut next, 0, &buf, sink)?;
        self.phase = Phase::Data { file, order, next };
        Ok(())
    }

    /// Ends the stream: it must have given all the bytes it announced; a header still buffered
    /// is parsed (its data handed to `sink`); every tensor's data must have come. Returns the
    /// file without its tensor data.
    pub fn finish<E: From<GgufError>>(
        mut self,
        mut sink: impl FnMut(StreamEvent<'_>) -> Result<(), E>,
    ) -> Result<GgufFile, E> {
        if let Some(announced) = self.total.filter(|&t| t != self.fed) {
            return Err(GgufError::StreamLength {
                announced,
                got: self.fed,
                ended: true,
            }
            .into());
        }
        if matches!(self.phase, Phase::Header { .. }) {
            self.parse_header(&mut sink, true)?;
        }
        let Phase::Data {
            mut file,
            order,
            next,
        } = self.phase
        else {
            return Err(GgufError::StreamFailed.into());
        };
        if let Some(&i) = order.get(next) {
            let t = &file.tensors()[i];
            let start = file.data_offset() + t.offset();
            return Err(GgufError::TensorPastEnd {
                name: t.name().to_owned(),
                start,
                end: start + t.size(),
                file_len: self.fed,
            }
            .into());
        }
        file.set_file_len(self.fed);
        Ok(file)
    }
}

/// Hands `sink` the pieces of tensor data in `bytes`, the file's bytes from offset `at`, starting
/// with tensor `order[*next]`; advances `next` past the tensors completed.
fn walk<E>(
    file: &GgufFile,
    order: &[usize],
    next: &mut usize,
    at: u64,
    bytes: &[u8],
    sink: &mut impl FnMut(StreamEvent<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let end = at + bytes.len() as u64;
    while let Some(&i) = order.get(*next) {
        let t = &file.tensors()[i];
        let t_start = file.data_offset() + t.offset();
        let t_end = t_start + t.size();
        if t_start >= end {
            break;
        }
        let (s, e) = (t_start.max(at), t_end.min(end));
        sink(StreamEvent::Data {
            tensor: t,
            offset: s - t_start,
            bytes: &bytes[(s - at) as usize..(e - at) as usize],
        })?;
        if e < t_end {
            break;
        }
        *next += 1;
    }
    Ok(())
}
