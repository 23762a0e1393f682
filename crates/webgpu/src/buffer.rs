//! Device memory: creating buffers within the device's limits, weights with their decoder
//! slack, padded writes, and the [`MemoryReport`] of what was allocated.
//!
//! Every size is u64 and padded to 4 bytes (wgpu copies and storage bindings work in words); a
//! byte count that does not fit the device's limits is an error naming the limit. What we
//! allocate is counted in a [`MemoryReport`]; nothing here guesses at free device memory.

use wgllm_core::graph::WeightData;
use wgllm_core::{Error, Graph, Result};

use crate::device::Gpu;

/// Bytes this backend allocated for one compiled graph, by purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReport {
    pub weights: u64,
    /// The activation arena, and what it would take without reuse.
    pub arena: u64,
    pub arena_without_reuse: u64,
    pub inputs: u64,
    /// State buffers this executable created (a state shared with an executable compiled
    /// alongside it is counted once, in the first).
    pub states: u64,
    /// The per-dispatch parameter block.
    pub params: u64,
    /// The readback buffer (grows to the largest read).
    pub staging: u64,
}

impl MemoryReport {
    /// All bytes allocated.
    pub fn total(&self) -> u64 {
        self.weights + self.arena + self.inputs + self.states + self.params + self.staging
    }
}

/// `x` rounded up to a multiple of `a`.
pub(crate) fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

pub(crate) const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// Creates a buffer of at least `size` bytes (padded to 4, never empty), checking the device's
/// maximum buffer size first. With `contents`, the bytes are written through a mapping at
/// creation; the padding stays zero, as does the whole buffer otherwise.
pub(crate) fn create(
    gpu: &Gpu,
    label: &str,
    size: u64,
    usage: wgpu::BufferUsages,
    contents: Option<&[u8]>,
) -> Result<wgpu::Buffer> {
    let padded = align_up(size.max(4), 4);
    let max = gpu.caps.limits.max_buffer_size;
    if padded > max {
        return Err(Error::Device {
            what: format!(
                "buffer '{label}' needs {padded} bytes, more than this device's max_buffer_size of {max}"
            ),
        });
    }
    gpu.counters.add_allocated(padded);
    gpu.scoped(&format!("allocating {padded} bytes for '{label}'"), || {
        let buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded,
            usage,
            mapped_at_creation: contents.is_some(),
        });
        if let Some(data) = contents {
            if let Ok(mut view) = buf.get_mapped_range_mut(..) {
                view.slice(..data.len()).copy_from_slice(data);
            }
            buf.unmap();
        }
        buf
    })
}

/// Bytes a weight's buffer has past its data: block decoders may read one word past a weight's
/// last block (quant_unit.wgsl).
const WEIGHT_SLACK: u64 = 4;

/// The buffer of weight `name` of `span` bytes, with its slack, zero-padded; filled from
/// `contents` when given, else written later (resident weights, `weights.rs`).
pub(crate) fn create_weight(
    gpu: &Gpu,
    name: &str,
    span: u64,
    contents: Option<&[u8]>,
) -> Result<wgpu::Buffer> {
    if let Some(data) = contents {
        gpu.counters.add_weight_bytes(data.len() as u64);
    }
    create(
        gpu,
        &format!("weight {name}"),
        span + WEIGHT_SLACK,
        USAGE,
        contents,
    )
}

/// Fails, naming the weight and both sizes, when a weight of `graph` (with its slack) is larger
/// than this device's largest buffer: before any upload, so a model that cannot load here
/// allocates nothing.
pub(crate) fn check_weights_fit(gpu: &Gpu, graph: &Graph) -> Result<()> {
    let max = gpu.caps.limits.max_buffer_size;
    for t in graph.ids() {
        let node = graph.node(t);
        let need = align_up(node.span_bytes() + WEIGHT_SLACK, 4);
        if matches!(graph.weight_source(t), Some(WeightData::Bytes(_))) && need > max {
            return Err(Error::Device {
                what: format!(
                    "weight '{}' needs {need} bytes, more than this device's max_buffer_size of {max}: the model cannot be loaded on this adapter",
                    node.name
                ),
            });
        }
    }
    Ok(())
}

/// Writes `data` at byte `offset` (a multiple of 4) of `buf`, whose size covers `data` padded to
/// 4 bytes; a trailing partial word is written zero-padded.
pub(crate) fn write_padded(queue: &wgpu::Queue, buf: &wgpu::Buffer, offset: u64, data: &[u8]) {
    let whole = data.len() / 4 * 4;
    if whole > 0 {
        queue.write_buffer(buf, offset, &data[..whole]);
    }
    if whole < data.len() {
        let mut tail = [0u8; 4];
        tail[..data.len() - whole].copy_from_slice(&data[whole..]);
        queue.write_buffer(buf, offset + whole as u64, &tail);
    }
}
