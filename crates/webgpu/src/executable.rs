//! A graph compiled for the GPU: every pipeline, bind group and parameter slot is made once in
//! [`WebGpuExecutable::new`]; [`Executable::run`] only writes inputs and encodes dispatches.
//!
//! A tensor is a (buffer, byte offset, strides) triple, so layout-only ops cost nothing. Each
//! operand is bound as a window starting at its byte offset rounded down to the device's storage
//! offset alignment; the remainder goes to the kernel as an element offset in the parameters.

use std::sync::Arc;

use wgllm_core::backend::ReadFuture;
use wgllm_core::{Error, Executable, Graph, Op, Result, TensorId};

use crate::buffer::{self, align_up, Buffers, MemoryReport, Shared};
use crate::config::WebGpuConfig;
use crate::device::Gpu;
use crate::ops::{Dispatch, Operand};
use crate::pipelines::{bind_group, Pipelines, Window};
use crate::shaders::{unit_bytes, ITEMS_WORD, OP_WORD, PARAM_BYTES, PARAM_WORDS};

/// One recorded kernel launch.
struct Step {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
}

/// A graph compiled for one WebGPU device.
pub struct WebGpuExecutable {
    gpu: Arc<Gpu>,
    graph: Graph,
    buffers: Buffers,
    steps: Vec<Step>,
    staging: Option<wgpu::Buffer>,
    dispatches_per_pass: usize,
    dispatches_per_submit: usize,
}

/// The binding window of an operand and its descriptor words (offset, ne[4], nb[4]).
fn window<'a>(
    gpu: &Gpu,
    graph: &Graph,
    buffers: &'a Buffers,
    o: &Operand,
) -> Result<(Window<'a>, [u32; 9])> {
    let (buf, base) = buffers.storage(graph, o.tensor)?;
    let start = base + o.layout.offset;
    let align = u64::from(gpu.caps.limits.min_storage_buffer_offset_alignment);
    let offset = start / align * align;
    let rem = start - offset;
    let size = align_up(rem + o.layout.span_bytes(o.dtype), 4)
        .max(4)
        .min(buf.size() - offset);
    let unit = unit_bytes(o.dtype);
    let word = |x: u64| {
        u32::try_from(x / unit).map_err(|_| Error::shape(format!("{x} does not fit a u32 index")))
    };
    let mut desc = [0u32; 9];
    desc[0] = word(rem)?;
    for d in 0..4 {
        desc[1 + d] = u32::try_from(o.layout.ne[d])
            .map_err(|_| Error::shape(format!("extent {} exceeds u32", o.layout.ne[d])))?;
        desc[5 + d] = word(o.layout.nb[d])?;
    }
    Ok((
        Window {
            buffer: buf,
            offset,
            size,
        },
        desc,
    ))
}

impl WebGpuExecutable {
    /// Allocates and uploads, compiles every kernel, and records every dispatch of `graph`.
    pub(crate) fn new(
        gpu: Arc<Gpu>,
        pipelines: &Pipelines,
        config: &WebGpuConfig,
        graph: &Graph,
        dispatches: Vec<Dispatch>,
        shared: &mut Shared,
    ) -> Result<WebGpuExecutable> {
        let mut buffers =
            Buffers::new(&gpu, graph, shared, crate::ops::scratch_bytes(&dispatches))?;
        let slot = align_up(
            PARAM_BYTES,
            u64::from(gpu.caps.limits.min_uniform_buffer_offset_alignment),
        );
        let dispatches: Vec<Dispatch> = dispatches
            .into_iter()
            .filter(|d| d.groups.iter().all(|&g| g > 0))
            .collect();
        let params = buffer::create(
            &gpu,
            "params",
            slot * dispatches.len().max(1) as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            None,
        )?;
        buffers.report.params = params.size();
        let mut words = vec![0u32; (params.size() / 4) as usize];
        let mut steps = Vec::with_capacity(dispatches.len());
        for (i, d) in dispatches.iter().enumerate() {
            let (pipeline, layout) = pipelines.get(&gpu, &d.key, config.shader_checks)?;
            let base = i * (slot / 4) as usize;
            let slot_words = &mut words[base..base + PARAM_WORDS];
            let mut windows = Vec::with_capacity(d.operands.len());
            for (k, o) in d.operands.iter().enumerate() {
                let (w, desc) = window(&gpu, graph, &buffers, o)?;
                slot_words[12 * k..12 * k + 9].copy_from_slice(&desc);
                windows.push(w);
            }
            slot_words[OP_WORD..OP_WORD + d.op_words.len()].copy_from_slice(&d.op_words);
            slot_words[ITEMS_WORD] = d.items;
            let bind_group = gpu.scoped("creating a bind group", || {
                bind_group(&gpu, &layout, &params, (i as u64) * slot, &windows)
            })?;
            steps.push(Step {
                pipeline,
                bind_group,
                groups: d.groups,
            });
        }
        gpu.queue
            .write_buffer(&params, 0, bytemuck::cast_slice(&words));
        Ok(WebGpuExecutable {
            gpu,
            graph: graph.clone(),
            buffers,
            steps,
            staging: None,
            dispatches_per_pass: config.dispatches_per_pass.max(1),
            dispatches_per_submit: config.dispatches_per_submit.max(1),
        })
    }

    /// Bytes this executable allocated on the device.
    pub fn memory_report(&self) -> MemoryReport {
        self.buffers.report
    }

    /// Number of kernel launches per run.
    pub fn dispatch_count(&self) -> usize {
        self.steps.len()
    }

    fn staging(&mut self, size: u64) -> Result<wgpu::Buffer> {
        match &self.staging {
            Some(b) if b.size() >= size => Ok(b.clone()),
            _ => {
                let b = buffer::create(
                    &self.gpu,
                    "staging",
                    size,
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    None,
                )?;
                self.buffers.report.staging = b.size();
                self.staging = Some(b.clone());
                Ok(b)
            }
        }
    }

    /// Copies `len` bytes at `offset` (both multiples of 4) of `src` back to the host, awaiting
    /// the mapping (natively it is done by the time this is first polled).
    async fn download(&mut self, src: &wgpu::Buffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        let staging = self.staging(len)?;
        let gpu = self.gpu.clone();
        gpu.scoped("reading back", || {
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.copy_buffer_to_buffer(src, offset, &staging, 0, len);
            gpu.queue.submit([enc.finish()]);
        })?;
        gpu.map_read(&staging, len).await?;
        let out = staging
            .get_mapped_range(0..len)
            .map(|v| v.to_vec())
            .map_err(|e| Error::Device {
                what: format!("reading the staging buffer: {e}"),
            });
        staging.unmap();
        out
    }

    /// Reads an output or state tensor: the one readback path behind `read` and `read_async`.
    async fn read_tensor(&mut self, t: TensorId) -> Result<Vec<u8>> {
        let node = self.graph.try_node(t)?.clone();
        let root_op = &self.graph.node(self.graph.root(t)).op;
        let readable = self.graph.outputs().contains(&t)
            || matches!(root_op, Op::State | Op::Input | Op::Weight);
        if !readable {
            return Err(Error::graph(format!(
                "'{}' is not an output; mark it with Graph::mark_output",
                node.name
            )));
        }
        let (dtype, l) = (node.dtype, node.layout);
        let span = l.span_bytes(dtype);
        if span == 0 {
            return Ok(Vec::new());
        }
        let (buf, base) = self.buffers.storage(&self.graph, t)?;
        let buf = buf.clone();
        let start = base + l.offset;
        let first = start / 4 * 4;
        let bytes = self
            .download(&buf, first, align_up(start + span, 4) - first)
            .await?;
        let skew = (start - first) as usize;
        let row_bytes = dtype
            .row_bytes(l.ne[0])
            .ok_or_else(|| Error::shape("row size"))? as usize;
        let ts = dtype.type_size();
        let mut out = Vec::with_capacity(l.nrows() as usize * row_bytes);
        for [_, i1, i2, i3] in l.rows() {
            let row = skew + (l.byte_offset(dtype, [0, i1, i2, i3]) - l.offset) as usize;
            if l.rows_contiguous(dtype) {
                out.extend_from_slice(&bytes[row..row + row_bytes]);
            } else {
                for i0 in 0..l.ne[0] as usize {
                    let e = row + i0 * l.nb[0] as usize;
                    out.extend_from_slice(&bytes[e..e + ts]);
                }
            }
        }
        Ok(out)
    }
}

impl Executable for WebGpuExecutable {
    fn run(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<()> {
        for t in self.graph.ids() {
            if self.graph.node(t).op == Op::Input && !inputs.iter().any(|(i, _)| *i == t) {
                return Err(Error::graph(format!(
                    "input '{}' was not given",
                    self.graph.node(t).name
                )));
            }
        }
        for (t, data) in inputs {
            let node = self.graph.try_node(*t)?;
            if node.op != Op::Input {
                return Err(Error::graph(format!("'{}' is not an input", node.name)));
            }
            if node.span_bytes() != data.len() as u64 {
                return Err(Error::shape(format!(
                    "input '{}' needs {} bytes, got {}",
                    node.name,
                    node.span_bytes(),
                    data.len()
                )));
            }
            let (buf, base) = self.buffers.storage(&self.graph, *t)?;
            buffer::write_padded(&self.gpu.queue, buf, base, data);
        }
        let gpu = &self.gpu;
        gpu.scoped("running the graph", || {
            for batch in self.steps.chunks(self.dispatches_per_submit) {
                let mut enc = gpu
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                for pass_steps in batch.chunks(self.dispatches_per_pass) {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: None,
                    });
                    for s in pass_steps {
                        pass.set_pipeline(&s.pipeline);
                        pass.set_bind_group(0, &s.bind_group, &[]);
                        pass.dispatch_workgroups(s.groups[0], s.groups[1], s.groups[2]);
                    }
                }
                gpu.queue.submit([enc.finish()]);
            }
        })
    }

    fn read(&mut self, t: TensorId) -> Result<Vec<u8>> {
        #[cfg(not(target_arch = "wasm32"))]
        return pollster::block_on(self.read_tensor(t));
        #[cfg(target_arch = "wasm32")]
        return Err(Error::Device {
            what: format!(
                "reading '{}': a browser cannot block on the GPU; use read_async",
                self.graph.try_node(t)?.name
            ),
        });
    }

    fn read_async(&mut self, t: TensorId) -> ReadFuture<'_> {
        Box::pin(self.read_tensor(t))
    }

    fn write(&mut self, t: TensorId, data: &[u8]) -> Result<()> {
        let node = self.graph.try_node(t)?;
        if node.op != Op::State {
            return Err(Error::graph(format!(
                "'{}' is not a state tensor",
                node.name
            )));
        }
        if node.span_bytes() != data.len() as u64 {
            return Err(Error::shape(format!(
                "state '{}' needs {} bytes, got {}",
                node.name,
                node.span_bytes(),
                data.len()
            )));
        }
        let (buf, base) = self.buffers.storage(&self.graph, t)?;
        buffer::write_padded(&self.gpu.queue, buf, base, data);
        Ok(())
    }
}
