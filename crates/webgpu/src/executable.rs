//! A graph compiled for the GPU: every pipeline, bind group and parameter slot is made once in
//! [`WebGpuExecutable::new`]; [`Executable::run`] only writes inputs and encodes dispatches.
//!
//! A tensor is a (buffer, byte offset, strides) triple, so layout-only ops cost nothing. Each
//! operand is bound as a window starting at its byte offset rounded down to the device's storage
//! offset alignment; the remainder goes to the kernel as an element offset in the parameters.
//!
//! [`WebGpuExecutable::run_profiled`] (or every run while the backend's profiling switch is on)
//! also times each dispatch; see [`crate::profile`]. An ordinary run encodes no query.

use std::sync::Arc;
use std::time::Instant;

use wgllm_core::backend::{submit_blocking, Abandoned, FinishFuture, ReadFuture, Ticket};
use wgllm_core::{Error, Executable, Graph, Op, Result, TensorId};

use crate::arena::{Buffers, Shared};
use crate::buffer::{self, align_up, MemoryReport};
use crate::config::WebGpuConfig;
use crate::device::Gpu;
use crate::kernels::{unit_bytes, ITEMS_WORD, OP_WORD, PARAM_BYTES, PARAM_WORDS};
use crate::ops::{Dispatch, Operand, Planned};
use crate::pipelines::{bind_group, Pipelines, Window};
use crate::profile::{
    Clock, DispatchInfo, DispatchTime, ProfileSwitch, Profiling, RunProfile, Timestamps,
};

/// One recorded kernel launch.
struct Step {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
    info: DispatchInfo,
}

impl Step {
    fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.groups[0], self.groups[1], self.groups[2]);
    }
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
    profiling: Arc<ProfileSwitch>,
    /// Made on the first profiled run.
    timestamps: Option<Timestamps>,
    /// Made on the first [`WebGpuExecutable::run_span`].
    span_timestamps: Option<Timestamps>,
    /// Whether a run has written (or fed) every input ([`WebGpuExecutable::rerun_span`]).
    inputs_written: bool,
    /// Runs submitted and not yet finished ([`Executable::submit`]).
    in_flight: Vec<InFlight>,
    /// Staging buffers of finished runs, for the next submits.
    free_staging: Vec<wgpu::Buffer>,
    /// Ids of tickets dropped unfinished: their runs' staging buffers go back to
    /// `free_staging` on the next submit.
    abandoned: Abandoned,
    next_ticket: u64,
}

/// A buffer-to-buffer copy encoded with a run.
struct Copy {
    src: wgpu::Buffer,
    src_offset: u64,
    dst: wgpu::Buffer,
    dst_offset: u64,
    size: u64,
}

/// Where a readable tensor lies: its buffer, the 4-byte-aligned range that covers it, and its
/// first byte's offset inside that range.
struct Span {
    buf: wgpu::Buffer,
    first: u64,
    len: u64,
    skew: usize,
}

/// A submitted run: the staging buffer its outputs are copied to, each output's offset there,
/// and the submission that copies them.
struct InFlight {
    id: u64,
    staging: wgpu::Buffer,
    size: u64,
    outputs: Vec<(TensorId, Option<(u64, usize)>)>,
    submission: wgpu::SubmissionIndex,
}

/// The timestamps a run writes.
#[derive(Clone, Copy)]
enum Timing<'a> {
    None,
    /// At the start of the first pass and the end of the last.
    Span(&'a Timestamps),
    /// Before and after every dispatch.
    Each(&'a Timestamps),
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
    // Block-quantized operands get one word more: decoders may read a word past the last block
    // (weights have that slack in their buffers).
    let tail = if o.dtype.is_quantized() { 4 } else { 0 };
    let size = align_up(rem + o.layout.span_bytes(o.dtype) + tail, 4)
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
    /// While `profiling` is on, every run is profiled and its profile pushed there.
    pub(crate) fn new(
        gpu: Arc<Gpu>,
        profiling: Arc<ProfileSwitch>,
        pipelines: &Pipelines,
        config: &WebGpuConfig,
        graph: &Graph,
        planned: Planned,
        shared: &mut Shared,
    ) -> Result<WebGpuExecutable> {
        let mut buffers = Buffers::new(&gpu, graph, shared, &planned)?;
        let slot = align_up(
            PARAM_BYTES,
            u64::from(gpu.caps.limits.min_uniform_buffer_offset_alignment),
        );
        let dispatches: Vec<Dispatch> = planned
            .dispatches
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
                info: DispatchInfo::new(d),
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
            profiling,
            timestamps: None,
            span_timestamps: None,
            inputs_written: false,
            in_flight: Vec::new(),
            free_staging: Vec::new(),
            abandoned: Abandoned::default(),
            next_ticket: 1,
        })
    }

    /// What each dispatch of a run is, in order.
    pub fn dispatches(&self) -> impl Iterator<Item = &DispatchInfo> {
        self.steps.iter().map(|s| &s.info)
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

    /// Where readable tensor `t` (an output or a state, input or weight leaf) lies; `None` when
    /// it has no bytes.
    fn span(&self, t: TensorId) -> Result<Option<Span>> {
        let node = self.graph.try_node(t)?;
        let root_op = &self.graph.node(self.graph.root(t)).op;
        let readable = self.graph.outputs().contains(&t)
            || matches!(root_op, Op::State | Op::Input | Op::Weight);
        if !readable {
            return Err(Error::graph(format!(
                "'{}' is not an output; mark it with Graph::mark_output",
                node.name
            )));
        }
        let span = node.layout.span_bytes(node.dtype);
        if span == 0 {
            return Ok(None);
        }
        let (buf, base) = self.buffers.storage(&self.graph, t)?;
        let start = base + node.layout.offset;
        let first = start / 4 * 4;
        Ok(Some(Span {
            buf: buf.clone(),
            first,
            len: align_up(start + span, 4) - first,
            skew: (start - first) as usize,
        }))
    }

    /// The contiguous rows of `t` from the bytes of its span, whose first byte is at `skew`.
    fn gather(&self, t: TensorId, bytes: &[u8], skew: usize) -> Result<Vec<u8>> {
        let node = self.graph.try_node(t)?;
        let (dtype, l) = (node.dtype, node.layout);
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

    /// Reads an output or state tensor: the one readback path behind `read` and `read_async`.
    async fn read_tensor(&mut self, t: TensorId) -> Result<Vec<u8>> {
        let Some(span) = self.span(t)? else {
            return Ok(Vec::new());
        };
        let bytes = self.download(&span.buf, span.first, span.len).await?;
        self.gather(t, &bytes, span.skew)
    }

    /// The copies that make inputs take the bytes of other tensors ([`Executable::submit`]).
    fn feed_copies(&self, feeds: &[(TensorId, TensorId)]) -> Result<Vec<Copy>> {
        feeds
            .iter()
            .map(|&(input, src)| {
                let (dst_node, src_node) = (self.graph.try_node(input)?, self.graph.try_node(src)?);
                if dst_node.op != Op::Input {
                    return Err(Error::graph(format!("'{}' is not an input", dst_node.name)));
                }
                let contiguous = |n: &wgllm_core::Node| {
                    n.layout.offset.is_multiple_of(4)
                        && n.layout.is_contiguous(n.dtype)
                        && n.span_bytes().is_multiple_of(4)
                };
                let from = self.span(src)?;
                let to = self.span(input)?;
                match (from, to) {
                    (Some(from), Some(to))
                        if from.len == to.len
                            && contiguous(src_node)
                            && contiguous(dst_node)
                            && from.skew == 0
                            && to.skew == 0 =>
                    {
                        Ok(Copy {
                            src: from.buf,
                            src_offset: from.first,
                            dst: to.buf,
                            dst_offset: to.first,
                            size: from.len,
                        })
                    }
                    _ => Err(Error::graph(format!(
                        "input '{}' cannot be fed from '{}': both must be contiguous, \
                         4-byte aligned and of the same size ({} and {} bytes)",
                        dst_node.name,
                        src_node.name,
                        dst_node.span_bytes(),
                        src_node.span_bytes()
                    ))),
                }
            })
            .collect()
    }

    /// Moves the staging buffers of runs whose tickets were dropped unfinished to the free
    /// list. Nothing maps them (only `finish` does), and a later run's copy into one is queued
    /// after the abandoned run's, so they are free for the next submit.
    fn reclaim_abandoned(&mut self) {
        let ids = match self.abandoned.lock() {
            Ok(mut ids) => std::mem::take(&mut *ids),
            Err(_) => return,
        };
        for id in ids {
            if let Some(i) = self.in_flight.iter().position(|f| f.id == id) {
                let run = self.in_flight.swap_remove(i);
                self.free_staging.push(run.staging);
            }
        }
    }

    /// A staging buffer of at least `size` bytes: a free one, or a new one.
    fn take_staging(&mut self, size: u64) -> Result<wgpu::Buffer> {
        if let Some(i) = self.free_staging.iter().position(|b| b.size() >= size) {
            return Ok(self.free_staging.swap_remove(i));
        }
        buffer::create(
            &self.gpu,
            "run outputs",
            size.max(4),
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            None,
        )
    }
}

impl WebGpuExecutable {
    /// Checks `inputs` (with the inputs `fed` on the device) against the graph's `Input` leaves
    /// and queues their upload.
    fn write_inputs(&mut self, inputs: &[(TensorId, &[u8])], fed: &[TensorId]) -> Result<()> {
        for t in self.graph.ids() {
            if self.graph.node(t).op == Op::Input
                && !inputs.iter().any(|(i, _)| *i == t)
                && !fed.contains(&t)
            {
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
        self.inputs_written = true;
        Ok(())
    }

    /// Encodes and submits every dispatch, with the timestamps `timing` asks for, the copies
    /// `before` ahead of the first and `after` behind the last; the last submission's index.
    fn encode(
        &self,
        timing: Timing<'_>,
        before: &[Copy],
        after: &[Copy],
    ) -> Result<wgpu::SubmissionIndex> {
        let gpu = &self.gpu;
        // Pieces let an idle GPU start on the first dispatches while the host encodes the rest.
        // A GPU still busy with earlier work (a decode step queued behind the one running) has
        // nothing to gain from them, and every submission boundary leaves it idle a while.
        let per_submit = match gpu.busy() {
            true => usize::MAX,
            false => self.dispatches_per_submit,
        };
        let mut batches: Vec<&[Step]> = self.steps.chunks(per_submit).collect();
        if batches.is_empty() {
            batches.push(&[]);
        }
        let n_batches = batches.len();
        let copy = |enc: &mut wgpu::CommandEncoder, copies: &[Copy]| {
            for c in copies {
                enc.copy_buffer_to_buffer(&c.src, c.src_offset, &c.dst, c.dst_offset, c.size);
            }
        };
        gpu.scoped("running the graph", || {
            let mut i = 0;
            let mut last = None;
            for (b, batch) in batches.into_iter().enumerate() {
                let mut enc = gpu
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                if b == 0 {
                    copy(&mut enc, before);
                }
                match timing {
                    // One pass per dispatch, timed by the pass's own timestamp writes.
                    Timing::Each(ts) if !ts.inside_passes => {
                        for s in batch {
                            let (query_set, q) = ts.slot(i);
                            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                                label: None,
                                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                                    query_set,
                                    beginning_of_pass_write_index: Some(q),
                                    end_of_pass_write_index: Some(q + 1),
                                }),
                            });
                            s.record(&mut pass);
                            i += 1;
                        }
                    }
                    _ => {
                        let passes = batch.len().div_ceil(self.dispatches_per_pass);
                        for (p, pass_steps) in batch.chunks(self.dispatches_per_pass).enumerate() {
                            // A span: the first pass's beginning and the last one's end.
                            let span = match timing {
                                Timing::Span(ts) => {
                                    let first = b == 0 && p == 0;
                                    let last = b + 1 == n_batches && p + 1 == passes;
                                    let (query_set, q) = ts.slot(0);
                                    (first || last).then_some(wgpu::ComputePassTimestampWrites {
                                        query_set,
                                        beginning_of_pass_write_index: first.then_some(q),
                                        end_of_pass_write_index: last.then_some(q + 1),
                                    })
                                }
                                _ => None,
                            };
                            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                                label: None,
                                timestamp_writes: span,
                            });
                            for s in pass_steps {
                                match timing {
                                    Timing::Each(ts) => {
                                        let (set, q) = ts.slot(i);
                                        pass.write_timestamp(set, q);
                                        s.record(&mut pass);
                                        pass.write_timestamp(set, q + 1);
                                    }
                                    _ => s.record(&mut pass),
                                }
                                i += 1;
                            }
                        }
                    }
                }
                if b + 1 == n_batches {
                    copy(&mut enc, after);
                }
                last = Some(gpu.queue.submit([enc.finish()]));
            }
            last
        })?
        .ok_or_else(|| Error::graph("a run encoded no command buffer"))
    }

    /// Resolves `ts` after the run just encoded and reads its timestamps back.
    fn read_timestamps(&self, ts: &Timestamps, n: usize) -> Result<(Vec<f64>, f64)> {
        let gpu = &self.gpu;
        gpu.scoped("resolving timestamps", || {
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            ts.resolve(&mut enc);
            gpu.queue.submit([enc.finish()]);
        })?;
        pollster::block_on(ts.read(gpu, n))
    }

    /// Runs the graph once like [`Executable::run`], timing only its span on the GPU (from the
    /// start of the first pass to the end of the last), so that it runs as it would unprofiled;
    /// on the host clock around submit-and-wait without TIMESTAMP_QUERY. Native only.
    pub fn run_span(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<RunProfile> {
        self.span_with(inputs, &[])
    }

    /// [`Self::run_span`] on the inputs an earlier run wrote, which stay on the device: a
    /// case timed run after run then leaves the GPU no gap for its upload (an idle GPU lowers
    /// its clocks, and the next runs then take longer).
    pub fn rerun_span(&mut self) -> Result<RunProfile> {
        let inputs = self.resident_inputs("rerun_span")?;
        self.span_with(&[], &inputs)
    }

    /// The graph's inputs, for a rerun (`what`) on the values an earlier run wrote; an error
    /// before any run wrote them.
    fn resident_inputs(&self, what: &str) -> Result<Vec<TensorId>> {
        if !self.inputs_written {
            return Err(Error::graph(format!(
                "{what} before any run wrote the graph's inputs"
            )));
        }
        Ok(self
            .graph
            .ids()
            .filter(|&t| self.graph.node(t).op == Op::Input)
            .collect())
    }

    /// [`Self::run_span`] writing `inputs`, the inputs `resident` left as they are.
    fn span_with(
        &mut self,
        inputs: &[(TensorId, &[u8])],
        resident: &[TensorId],
    ) -> Result<RunProfile> {
        if cfg!(target_arch = "wasm32") {
            return Err(Error::Device {
                what: "profiling waits for the GPU, which a browser cannot do".into(),
            });
        }
        self.write_inputs(inputs, resident)?;
        let gpu = self.gpu.clone();
        if !gpu.caps.timestamp_query {
            gpu.queue.submit([]);
            gpu.wait("uploading inputs")?;
            let t0 = Instant::now();
            self.encode(Timing::None, &[], &[])?;
            let encode_ns = t0.elapsed().as_secs_f64() * 1e9;
            gpu.wait("running the graph")?;
            return Ok(RunProfile {
                clock: Clock::Host,
                dispatches: Vec::new(),
                encode_ns,
                span_ns: t0.elapsed().as_secs_f64() * 1e9,
            });
        }
        if self.span_timestamps.is_none() {
            self.span_timestamps = Some(Timestamps::new(&gpu, 1)?);
        }
        let ts = self
            .span_timestamps
            .as_ref()
            .ok_or_else(|| Error::graph("timestamp queries were not created"))?;
        let t0 = Instant::now();
        self.encode(Timing::Span(ts), &[], &[])?;
        let encode_ns = t0.elapsed().as_secs_f64() * 1e9;
        let (_, span_ns) = self.read_timestamps(ts, 1)?;
        Ok(RunProfile {
            clock: Clock::GpuTimestamps,
            dispatches: Vec::new(),
            encode_ns,
            span_ns,
        })
    }

    /// Runs the graph once like [`Executable::run`], timing every dispatch: with GPU timestamps
    /// when the device has TIMESTAMP_QUERY, else on the host clock one dispatch at a time.
    /// Waits for the GPU, so it is native only. The query sets are made on the first call and
    /// reused.
    pub fn run_profiled(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<RunProfile> {
        self.profiled_with(inputs, &[])
    }

    /// [`Self::run_profiled`] on the inputs an earlier run wrote (as [`Self::rerun_span`]).
    pub fn rerun_profiled(&mut self) -> Result<RunProfile> {
        let inputs = self.resident_inputs("rerun_profiled")?;
        self.profiled_with(&[], &inputs)
    }

    /// [`Self::run_profiled`] writing `inputs`, the inputs `resident` left as they are.
    fn profiled_with(
        &mut self,
        inputs: &[(TensorId, &[u8])],
        resident: &[TensorId],
    ) -> Result<RunProfile> {
        if cfg!(target_arch = "wasm32") {
            return Err(Error::Device {
                what: "profiling waits for the GPU, which a browser cannot do".into(),
            });
        }
        self.write_inputs(inputs, resident)?;
        if !self.gpu.caps.timestamp_query {
            return self.run_host_timed();
        }
        if self.timestamps.is_none() {
            self.timestamps = Some(Timestamps::new(&self.gpu, self.steps.len())?);
        }
        let ts = self
            .timestamps
            .as_ref()
            .ok_or_else(|| Error::graph("timestamp queries were not created"))?;
        let t0 = Instant::now();
        self.encode(Timing::Each(ts), &[], &[])?;
        let encode_ns = t0.elapsed().as_secs_f64() * 1e9;
        let (ns, span_ns) = self.read_timestamps(ts, self.steps.len())?;
        Ok(RunProfile {
            clock: Clock::GpuTimestamps,
            dispatches: self
                .steps
                .iter()
                .zip(ns)
                .map(|(s, ns)| DispatchTime {
                    info: s.info.clone(),
                    ns,
                })
                .collect(),
            encode_ns,
            span_ns,
        })
    }

    /// Submits each dispatch alone and times it on the host until the queue is idle.
    fn run_host_timed(&mut self) -> Result<RunProfile> {
        let gpu = &self.gpu;
        // Flush the input uploads first so that they are not timed with the first dispatch.
        gpu.queue.submit([]);
        gpu.wait("uploading inputs")?;
        let start = Instant::now();
        let mut encode_ns = 0.0;
        let mut dispatches = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let t0 = Instant::now();
            gpu.scoped("running a dispatch", || {
                let mut enc = gpu
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                s.record(&mut enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: None,
                }));
                gpu.queue.submit([enc.finish()]);
            })?;
            encode_ns += t0.elapsed().as_secs_f64() * 1e9;
            gpu.wait("waiting for a dispatch")?;
            dispatches.push(DispatchTime {
                info: s.info.clone(),
                ns: t0.elapsed().as_secs_f64() * 1e9,
            });
        }
        Ok(RunProfile {
            clock: Clock::Host,
            dispatches,
            encode_ns,
            span_ns: start.elapsed().as_secs_f64() * 1e9,
        })
    }
}

impl Executable for WebGpuExecutable {
    fn run(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<()> {
        let p = match self.profiling.mode() {
            Profiling::Off => {
                self.write_inputs(inputs, &[])?;
                return self.encode(Timing::None, &[], &[]).map(|_| ());
            }
            Profiling::Span => self.run_span(inputs)?,
            Profiling::Dispatches => self.run_profiled(inputs)?,
        };
        self.profiling.push(p);
        Ok(())
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

    fn submit(
        &mut self,
        inputs: &[(TensorId, &[u8])],
        feeds: &[(TensorId, TensorId)],
        outputs: &[TensorId],
    ) -> Result<Ticket> {
        if self.profiling.mode() != Profiling::Off {
            return submit_blocking(self, inputs, feeds, outputs);
        }
        self.reclaim_abandoned();
        let before = self.feed_copies(feeds)?;
        let fed: Vec<TensorId> = feeds.iter().map(|f| f.0).collect();
        let mut placed = Vec::with_capacity(outputs.len());
        let mut size = 0;
        let mut spans = Vec::with_capacity(outputs.len());
        for &t in outputs {
            match self.span(t)? {
                Some(s) => {
                    placed.push((t, Some((size, s.skew))));
                    size += s.len;
                    spans.push(s);
                }
                None => placed.push((t, None)),
            }
        }
        self.write_inputs(inputs, &fed)?;
        let staging = self.take_staging(size)?;
        let mut at = 0;
        let after: Vec<Copy> = spans
            .into_iter()
            .map(|s| {
                let c = Copy {
                    src: s.buf,
                    src_offset: s.first,
                    dst: staging.clone(),
                    dst_offset: at,
                    size: s.len,
                };
                at += s.len;
                c
            })
            .collect();
        let submission = self.encode(Timing::None, &before, &after)?;
        let id = self.next_ticket;
        self.next_ticket += 1;
        self.in_flight.push(InFlight {
            id,
            staging,
            size,
            outputs: placed,
            submission,
        });
        Ok(Ticket::pending_reported(id, &self.abandoned))
    }

    fn finish(&mut self, ticket: Ticket) -> FinishFuture<'_> {
        Box::pin(async move {
            let id = ticket.id();
            if let Some(ready) = ticket.into_ready() {
                return Ok(ready);
            }
            let i = self
                .in_flight
                .iter()
                .position(|f| f.id == id)
                .ok_or_else(|| Error::graph("this ticket was not made by this executable"))?;
            let run = self.in_flight.swap_remove(i);
            if run.size > 0 {
                self.gpu
                    .map_read_after(&run.staging, run.size, Some(run.submission))
                    .await?;
            }
            let out = {
                let bytes = match run.size {
                    0 => Vec::new(),
                    n => run
                        .staging
                        .get_mapped_range(0..n)
                        .map(|v| v.to_vec())
                        .map_err(|e| Error::Device {
                            what: format!("reading a run's outputs: {e}"),
                        })?,
                };
                run.outputs
                    .iter()
                    .map(|&(t, at)| match at {
                        Some((offset, skew)) => self.gather(t, &bytes[offset as usize..], skew),
                        None => Ok(Vec::new()),
                    })
                    .collect::<Result<Vec<_>>>()
            };
            if run.size > 0 {
                run.staging.unmap();
            }
            self.free_staging.push(run.staging);
            out
        })
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

#[cfg(test)]
mod tests {
    use wgllm_core::{DType, Executable, Graph, TensorId};

    use crate::profile::{families, Clock, Profiling};
    use crate::{WebGpuBackend, WebGpuConfig};

    /// x [64, 3] → rms_norm → mul_mat with an f32 weight [64, 32] → add x-independent bias.
    fn graph() -> (Graph, TensorId, TensorId) {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
        let w: Vec<u8> = (0..64 * 32)
            .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
            .collect();
        let w = g.weight("w", DType::F32, [64, 32, 1, 1], w.into()).unwrap();
        let n = g.rms_norm(x, 1e-6).unwrap();
        let y = g.mul_mat(w, n).unwrap();
        let y = g.scale(y, 2.0, 1.0).unwrap();
        g.mark_output(y).unwrap();
        (g, x, y)
    }

    fn x_bytes() -> Vec<u8> {
        (0..64 * 3)
            .flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes())
            .collect()
    }

    #[test]
    fn profiled_runs_time_every_dispatch_and_compute_the_same() {
        let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let (g, x, y) = graph();
        let xb = x_bytes();
        let mut exe = gpu.compile_webgpu(&g).unwrap();
        exe.run(&[(x, &xb)]).unwrap();
        let plain = exe.read(y).unwrap();
        let n = exe.dispatch_count();
        assert!(n >= 3, "{n} dispatches");
        assert!(exe
            .dispatches()
            .any(|d| d.family.starts_with("mul_mat") && d.flops == 2 * 64 * 32 * 3));
        let expected_clock = match gpu.capabilities().timestamp_query {
            true => Clock::GpuTimestamps,
            false => Clock::Host,
        };
        let check = |exe: &mut crate::WebGpuExecutable| {
            let p = exe.run_profiled(&[(x, &xb)]).unwrap();
            assert_eq!(p.clock, expected_clock);
            assert_eq!(p.dispatches.len(), n);
            assert!(p.dispatches.iter().all(|d| d.ns >= 0.0 && d.ns.is_finite()));
            assert!(p.span_ns >= 0.0 && p.encode_ns > 0.0);
            assert_eq!(
                exe.read(y).unwrap(),
                plain,
                "a profiled run computes the same"
            );
            let fams = families(std::slice::from_ref(&p));
            let total: f64 = fams.iter().map(|f| f.dispatches).sum();
            assert_eq!(total as usize, n);
        };
        // Timestamps inside the ordinary passes (lavapipe has TIMESTAMP_QUERY_INSIDE_PASSES)...
        check(&mut exe);
        // ... and one pass per dispatch, the form WebGPU guarantees.
        if let Some(ts) = exe.timestamps.as_mut() {
            ts.inside_passes = false;
            check(&mut exe);
        }
        // The host-clock fallback of devices without TIMESTAMP_QUERY.
        let p = exe.run_host_timed().unwrap();
        assert_eq!((p.clock, p.dispatches.len()), (Clock::Host, n));
        assert!(p.dispatches.iter().all(|d| d.ns > 0.0));
    }

    /// A span-timed or profiled rerun runs the graph again on the inputs the last run wrote:
    /// a state that each run adds the input into holds 1, 2, 3 times it, a span run on new
    /// inputs replaces them, and a rerun before any run wrote them is an error.
    #[test]
    fn reruns_compute_on_the_inputs_left_on_the_device() {
        let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut g = Graph::new();
        let acc = g.state("acc", DType::F32, [8, 1, 1, 1]).unwrap();
        let x = g.input("x", DType::F32, [8, 1, 1, 1]).unwrap();
        let sum = g.add(acc, x).unwrap();
        let out = g.cpy(sum, acc).unwrap();
        g.mark_output(out).unwrap();
        let bytes =
            |v: f32| -> Vec<u8> { (1..=8).flat_map(|i| (v * i as f32).to_le_bytes()).collect() };
        let mut exe = gpu.compile_webgpu(&g).unwrap();
        exe.write(acc, &bytes(0.0)).unwrap();
        assert!(exe.rerun_span().is_err(), "no run has written x yet");
        assert!(exe.rerun_profiled().is_err(), "no run has written x yet");
        exe.run_span(&[(x, &bytes(1.0))]).unwrap();
        for k in 2..=3 {
            exe.rerun_span().unwrap();
            assert_eq!(exe.read(out).unwrap(), bytes(k as f32), "after {k} runs");
        }
        exe.run_span(&[(x, &bytes(10.0))]).unwrap();
        exe.rerun_span().unwrap();
        assert_eq!(exe.read(out).unwrap(), bytes(23.0));
        // Reruns timed dispatch by dispatch read the same inputs, one time each dispatch.
        let p = exe.rerun_profiled().unwrap();
        assert_eq!(p.dispatches.len(), exe.dispatch_count());
        assert_eq!(exe.read(out).unwrap(), bytes(33.0));
    }

    /// A run whose ticket is dropped unfinished (a step queued ahead of a generation that an
    /// error ended) gives its staging buffer back on the next submit: a loop of such runs keeps
    /// one run in flight and one buffer, and finishing still reads the right run.
    #[test]
    fn tickets_dropped_unfinished_give_their_staging_buffers_back() {
        let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let (g, x, y) = graph();
        let xb = x_bytes();
        let mut exe = gpu.compile_webgpu(&g).unwrap();
        exe.run(&[(x, &xb)]).unwrap();
        let want = exe.read(y).unwrap();
        for _ in 0..5 {
            drop(exe.submit(&[(x, &xb)], &[], &[y]).unwrap());
        }
        let t = exe.submit(&[(x, &xb)], &[], &[y]).unwrap();
        assert_eq!(exe.in_flight.len(), 1, "abandoned runs are reclaimed");
        assert_eq!(
            exe.free_staging.len(),
            0,
            "one staging buffer serves them all"
        );
        assert_eq!(pollster::block_on(exe.finish(t)).unwrap(), vec![want]);
        assert_eq!(exe.free_staging.len(), 1);
        // A finished ticket is not reported as abandoned.
        assert!(exe.abandoned.lock().unwrap().is_empty());
    }

    #[test]
    fn the_backend_switch_profiles_runs_only_while_on() {
        let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let (g, x, y) = graph();
        let xb = x_bytes();
        let mut exe = gpu.compile_webgpu(&g).unwrap();
        exe.run(&[(x, &xb)]).unwrap();
        assert!(gpu.take_profiles().is_empty());
        assert!(
            exe.timestamps.is_none(),
            "an ordinary run makes no query set"
        );
        let plain = exe.read(y).unwrap();
        gpu.set_profiling(Profiling::Dispatches);
        exe.run(&[(x, &xb)]).unwrap();
        exe.run(&[(x, &xb)]).unwrap();
        gpu.set_profiling(Profiling::Span);
        exe.run(&[(x, &xb)]).unwrap();
        assert_eq!(
            exe.read(y).unwrap(),
            plain,
            "a span-timed run computes the same"
        );
        gpu.set_profiling(Profiling::Off);
        exe.run(&[(x, &xb)]).unwrap();
        let runs = gpu.take_profiles();
        assert_eq!(runs.len(), 3);
        assert!(runs[..2]
            .iter()
            .all(|r| r.dispatches.len() == exe.dispatch_count()));
        assert!(runs[2].dispatches.is_empty() && runs[2].span_ns > 0.0);
        assert!(gpu.take_profiles().is_empty());
    }
}
