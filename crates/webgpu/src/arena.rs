//! The buffers of one compiled graph: weights uploaded once as-is (quantized weights keep their
//! GGUF block bytes) or bound from the backend's resident uploads, one activation arena laid out
//! by the core memory planner, zero-initialized persistent state buffers, input buffers
//! rewritten every run, and a staging buffer for reads.

use std::collections::{HashMap, HashSet};

use wgllm_core::graph::WeightData;
use wgllm_core::plan::{plan_memory_with, MemoryPlan};
use wgllm_core::{Error, Graph, Op, Result, TensorId};

use crate::buffer::{align_up, create, create_weight, MemoryReport, USAGE};
use crate::device::Gpu;
use crate::ops::{scratch_bytes, Planned, ABSENT, ABSENT_SLOTS, ABSENT_STRIDE, SCRATCH};
use crate::weights::Resident;

/// Buffers that executables compiled together share: `State` leaves by name, weights by the
/// identity of their bytes (the same file region referenced by several step graphs is uploaded
/// once), and the backend's resident weights.
pub(crate) struct Shared {
    states: HashMap<String, wgpu::Buffer>,
    weights: HashMap<(String, usize, usize), wgpu::Buffer>,
    /// The resident weights by name, as they were when compilation began.
    resident: HashMap<String, Resident>,
    /// Resident weights already counted in a memory report.
    resident_counted: HashSet<String>,
}

impl Shared {
    pub(crate) fn new(resident: HashMap<String, Resident>) -> Shared {
        Shared {
            states: HashMap::new(),
            weights: HashMap::new(),
            resident,
            resident_counted: HashSet::new(),
        }
    }
}

/// The buffers of one compiled graph.
pub(crate) struct Buffers {
    arena: wgpu::Buffer,
    /// Bound for inputs a kernel variant does not read (`ops::ABSENT`).
    absent: wgpu::Buffer,
    scratch: Option<wgpu::Buffer>,
    own: HashMap<TensorId, wgpu::Buffer>,
    plan: MemoryPlan,
    pub(crate) report: MemoryReport,
}

impl Buffers {
    /// Plans the arena with the device's storage offset alignment and creates every buffer,
    /// uploading weights. `State` leaves and weights take their buffer from `shared`, or create
    /// it there, so executables compiled together share states and upload each weight once;
    /// resident weights are bound from the backend's uploads, and refused when not there.
    /// `planned` gives the scratch the dispatches need (`ops::SCRATCH`) and the late reads of
    /// fused kernels, which extend lifetimes in the arena plan.
    pub(crate) fn new(
        gpu: &Gpu,
        graph: &Graph,
        shared: &mut Shared,
        planned: &Planned,
    ) -> Result<Buffers> {
        let scratch = scratch_bytes(&planned.dispatches);
        let align = u64::from(gpu.caps.limits.min_storage_buffer_offset_alignment);
        let mut plan = plan_memory_with(graph, align, &planned.late_reads, &|_| false);
        // An arena past one buffer (WebGPU's default max_buffer_size is 256 MiB): the computed
        // tensors over a quarter of that take buffers of their own (a prompt's logits).
        let max = gpu.caps.limits.max_buffer_size;
        let mut apart = HashSet::new();
        if align_up(plan.arena_bytes, align) + 4 > max {
            apart = graph
                .ids()
                .filter(|&t| plan.offsets[t.index()].is_some())
                .filter(|&t| graph.node(t).span_bytes() > max / 4)
                .collect();
            plan = plan_memory_with(graph, align, &planned.late_reads, &|t| apart.contains(&t));
        }
        let mut report = MemoryReport {
            arena_without_reuse: plan.naive_bytes,
            ..MemoryReport::default()
        };
        // Slack past the end so a window rounded up to whole words stays inside.
        let arena_size = align_up(plan.arena_bytes, align) + 4;
        let arena = create(gpu, "arena", arena_size, USAGE, None)?;
        let scratch = match scratch {
            0 => None,
            n => Some(create(gpu, "scratch", align_up(n, 4) + 4, USAGE, None)?),
        };
        let absent = create(gpu, "absent", ABSENT_SLOTS * ABSENT_STRIDE, USAGE, None)?;
        report.arena = arena.size() + scratch.as_ref().map_or(0, |b| b.size());
        let mut own = HashMap::new();
        for t in graph.ids() {
            let node = graph.node(t);
            let buf = match node.op {
                Op::Weight => match graph.weight_source(t) {
                    Some(WeightData::Bytes(data)) => {
                        let key = (node.name.clone(), data.as_ptr() as usize, data.len());
                        match shared.weights.get(&key) {
                            Some(b) => b.clone(),
                            None => {
                                let b =
                                    create_weight(gpu, &node.name, node.span_bytes(), Some(data))?;
                                report.weights += b.size();
                                shared.weights.insert(key, b.clone());
                                b
                            }
                        }
                    }
                    Some(WeightData::Resident(key)) => {
                        let resident = shared.resident.get(key).ok_or_else(|| {
                            Error::graph(format!(
                                "weight '{}' names resident weight '{key}', which was not uploaded to this backend (WebGpuBackend::upload_weight)",
                                node.name
                            ))
                        })?;
                        let b = resident.buffer_for(key, node)?.clone();
                        if shared.resident_counted.insert(key.clone()) {
                            report.weights += b.size();
                        }
                        b
                    }
                    None => {
                        return Err(Error::graph(format!("weight '{}' has no data", node.name)))
                    }
                },
                Op::State => match shared.states.get(&node.name) {
                    Some(b) => b.clone(),
                    None => {
                        let label = format!("state {}", node.name);
                        let b = create(gpu, &label, node.span_bytes(), USAGE, None)?;
                        report.states += b.size();
                        shared.states.insert(node.name.clone(), b.clone());
                        b
                    }
                },
                Op::Input => {
                    let label = format!("input {}", node.name);
                    let b = create(gpu, &label, node.span_bytes(), USAGE, None)?;
                    report.inputs += b.size();
                    b
                }
                _ if apart.contains(&t) => {
                    let label = format!("tensor {}", node.name);
                    let b = create(gpu, &label, node.span_bytes(), USAGE, None)?;
                    report.arena += b.size();
                    b
                }
                _ => continue,
            };
            own.insert(t, buf);
        }
        Ok(Buffers {
            arena,
            absent,
            scratch,
            own,
            plan,
            report,
        })
    }

    /// The buffer holding `t`'s root storage and the byte offset of that storage in it.
    pub(crate) fn storage(&self, graph: &Graph, t: TensorId) -> Result<(&wgpu::Buffer, u64)> {
        if t == ABSENT {
            return Ok((&self.absent, 0));
        }
        if t == SCRATCH {
            return self
                .scratch
                .as_ref()
                .map(|b| (b, 0))
                .ok_or_else(|| Error::graph("a dispatch uses scratch that was not allocated"));
        }
        let root = graph.root(t);
        if let Some(b) = self.own.get(&root) {
            return Ok((b, 0));
        }
        match self.plan.offsets.get(root.index()).copied().flatten() {
            Some(off) => Ok((&self.arena, off)),
            None => Err(Error::graph(format!(
                "tensor '{}' has no storage",
                graph.node(root).name
            ))),
        }
    }
}
