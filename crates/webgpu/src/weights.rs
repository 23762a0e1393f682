//! Resident weights: model tensors uploaded to the device before any graph is built, so a model
//! streamed from the network reaches the GPU piece by piece and its file never sits in host
//! memory (the browser's `loadStream`). A graph names them with `Graph::resident_weight`; when
//! compiling, `arena::Buffers` binds the resident buffer exactly as it binds a weight uploaded
//! from bytes: the same buffer size, decoder slack and zero padding (`buffer::create_weight`),
//! the same binding windows.
//!
//! Pieces of one tensor arrive in order at any byte boundary; wgpu writes whole 4-byte words at
//! word offsets, so up to 3 bytes wait for the next piece, and the last partial word is written
//! zero-padded. Nothing else is kept on the host.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use wgllm_core::{DType, Error, Layout, Node, Result};

use crate::buffer::{create_weight, write_padded};
use crate::device::Gpu;
use crate::WebGpuBackend;

/// One resident weight and how much of it has arrived.
#[derive(Clone)]
pub(crate) struct Resident {
    buf: wgpu::Buffer,
    dtype: DType,
    ne: [u64; 4],
    size: u64,
    /// Bytes received, the `carry` ones included.
    received: u64,
    /// Bytes past the last whole word written, waiting for the rest of their word.
    carry: [u8; 4],
    carry_len: usize,
}

impl Resident {
    /// Writes the next piece of the tensor's bytes, holding back a partial word.
    fn append(&mut self, gpu: &Gpu, name: &str, mut bytes: &[u8]) -> Result<()> {
        gpu.counters.add_weight_bytes(bytes.len() as u64);
        gpu.scoped(&format!("uploading weight '{name}'"), || {
            let q = &gpu.queue;
            // The byte offset of `carry[0]`, a word boundary.
            let mut at = self.received - self.carry_len as u64;
            self.received += bytes.len() as u64;
            if self.carry_len > 0 {
                let k = (4 - self.carry_len).min(bytes.len());
                self.carry[self.carry_len..self.carry_len + k].copy_from_slice(&bytes[..k]);
                self.carry_len += k;
                bytes = &bytes[k..];
                if self.carry_len == 4 {
                    q.write_buffer(&self.buf, at, &self.carry);
                    at += 4;
                    self.carry_len = 0;
                }
            }
            // Either the carry is empty now, or the piece was used up filling it.
            let whole = bytes.len() / 4 * 4;
            if whole > 0 {
                q.write_buffer(&self.buf, at, &bytes[..whole]);
            }
            let tail = &bytes[whole..];
            if !tail.is_empty() {
                self.carry[..tail.len()].copy_from_slice(tail);
                self.carry_len = tail.len();
            }
            if self.received == self.size {
                write_padded(
                    q,
                    &self.buf,
                    at + whole as u64,
                    &self.carry[..self.carry_len],
                );
                self.carry_len = 0;
                // Natively the writes wait in staging memory until a submit: flush them per
                // tensor so that a streamed model never has more than one tensor staged.
                q.submit([]);
            }
        })
    }

    /// The buffer for weight `node` of a graph, which names this tensor as `key`: the upload
    /// must be complete and of the node's dtype and extents.
    pub(crate) fn buffer_for(&self, key: &str, node: &Node) -> Result<&wgpu::Buffer> {
        let name = &node.name;
        if (self.dtype, self.ne) != (node.dtype, node.layout.ne) {
            return Err(Error::graph(format!(
                "weight '{name}' is {} {:?} in the graph, but resident weight '{key}' is {} {:?}",
                node.dtype, node.layout.ne, self.dtype, self.ne
            )));
        }
        if self.received < self.size {
            return Err(Error::graph(format!(
                "weight '{name}': only {} of the {} bytes of resident weight '{key}' were uploaded",
                self.received, self.size
            )));
        }
        Ok(&self.buf)
    }
}

/// The resident weights of one backend, by name.
#[derive(Default)]
pub(crate) struct ResidentStore {
    weights: Mutex<HashMap<String, Resident>>,
}

impl ResidentStore {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Resident>> {
        // A panic while the map was held leaves at worst a partly written upload, which
        // `buffer_for` refuses; the map itself stays consistent.
        self.weights.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The weights as they are now, for one compilation.
    pub(crate) fn snapshot(&self) -> HashMap<String, Resident> {
        self.lock().clone()
    }
}

impl WebGpuBackend {
    /// Uploads bytes `offset .. offset + bytes.len()` of the weight `name` (`dtype`, extents
    /// `ne`, contiguous) to the device, where graphs built with `Graph::resident_weight(name, …)`
    /// find it when compiled. A piece at offset 0 starts the tensor (allocating its buffer,
    /// replacing an earlier upload of that name); each later piece must start where the last
    /// ended. Pieces may split the tensor at any byte.
    pub fn upload_weight(
        &self,
        name: &str,
        dtype: DType,
        ne: [u64; 4],
        offset: u64,
        bytes: &[u8],
    ) -> Result<()> {
        let mut weights = self.resident.lock();
        if offset == 0 {
            let size = Layout::contiguous(dtype, ne)?.span_bytes(dtype);
            let buf = create_weight(&self.gpu, name, size, None)?;
            let fresh = Resident {
                buf,
                dtype,
                ne,
                size,
                received: 0,
                carry: [0; 4],
                carry_len: 0,
            };
            weights.insert(name.to_owned(), fresh);
        }
        let w = weights.get_mut(name).ok_or_else(|| {
            Error::graph(format!(
                "weight '{name}': a piece at byte {offset} before the piece at byte 0"
            ))
        })?;
        if (w.dtype, w.ne) != (dtype, ne) {
            return Err(Error::graph(format!(
                "weight '{name}': a piece of {dtype} {ne:?}, but the upload is {} {:?}",
                w.dtype, w.ne
            )));
        }
        if offset != w.received {
            return Err(Error::graph(format!(
                "weight '{name}': a piece at byte {offset}, but {} bytes were uploaded (pieces must come in order)",
                w.received
            )));
        }
        let end = offset + bytes.len() as u64;
        if end > w.size {
            return Err(Error::shape(format!(
                "weight '{name}': a piece reaching byte {end} of a {}-byte tensor",
                w.size
            )));
        }
        w.append(&self.gpu, name, bytes)
    }

    /// Bytes of the resident weights whose upload is complete, and their count.
    pub fn resident_weights(&self) -> (usize, u64) {
        let weights = self.resident.lock();
        let done = weights.values().filter(|w| w.received == w.size);
        done.fold((0, 0), |(n, bytes), w| (n + 1, bytes + w.buf.size()))
    }

    /// Forgets every resident weight. Executables compiled with them keep their buffers alive;
    /// the memory is freed when the last of those goes.
    pub fn drop_resident_weights(&self) {
        self.resident.lock().clear();
    }
}
