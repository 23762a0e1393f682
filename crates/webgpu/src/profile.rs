//! Dispatch-by-dispatch timing of a compiled graph, for `wgllm bench --profile` and
//! `wgllm ops --perf`.
//!
//! With TIMESTAMP_QUERY a profiled run writes a GPU timestamp before and after every dispatch:
//! inside the usual compute passes when the device also has TIMESTAMP_QUERY_INSIDE_PASSES, else
//! as the beginning and end writes of one pass per dispatch (the only form WebGPU itself
//! guarantees). The timestamps are resolved into a buffer and read back after the run. On Vulkan
//! both forms are written at the bottom of the pipe, so "before" is when earlier work finished.
//!
//! Without TIMESTAMP_QUERY each dispatch is submitted alone and timed on the host until the queue
//! is idle, which adds submission and wake-up latency to every figure ([`Clock::Host`]).
//!
//! Profiling is off unless asked for: an ordinary run encodes no query and allocates nothing.
//! The query sets and buffers are made on the first profiled run and reused after it.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use wgllm_core::{Error, Result};

use crate::buffer;
use crate::device::Gpu;
use crate::kernels::{Kernel, PipelineKey};
use crate::ops::Dispatch;

/// Which clock a profile was measured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// GPU timestamp queries around each dispatch.
    GpuTimestamps,
    /// The host clock around a submit-and-wait of each dispatch (the device has no
    /// TIMESTAMP_QUERY); includes submission latency.
    Host,
}

impl fmt::Display for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Clock::GpuTimestamps => "GPU timestamps",
            Clock::Host => "host clock (no TIMESTAMP_QUERY: includes submit latency)",
        })
    }
}

/// What one dispatch is, fixed when the graph is compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchInfo {
    /// Kernel family and dtype of its first binding, e.g. `mul_mat q4_0`.
    pub family: String,
    /// The full pipeline key: kernel variant, binding dtypes, workgroup size.
    pub variant: String,
    /// Bytes of the operands' views (what the kernel must touch at least once).
    pub bytes: u64,
    /// Floating-point operations of matrix products and attention, else 0.
    pub flops: u64,
}

impl DispatchInfo {
    /// Describes `d`.
    pub(crate) fn new(d: &Dispatch) -> DispatchInfo {
        let first = d
            .key
            .dtypes
            .first()
            .map_or(String::new(), |t| format!(" {t}"));
        DispatchInfo {
            family: format!("{}{first}", family_name(&d.key.kernel)),
            variant: variant_name(&d.key),
            // Operands bound twice (placeholders for absent optional sources) count once.
            bytes: d
                .operands
                .iter()
                .enumerate()
                .filter(|(i, o)| !d.operands[..*i].contains(o))
                .map(|(_, o)| o.layout.span_bytes(o.dtype))
                .sum(),
            flops: flops(d),
        }
    }
}

/// `MulMat { tn: 4 }` → `mul_mat`; `Shape(Repeat)` → `shape`.
fn family_name(k: &Kernel) -> String {
    let dbg = format!("{k:?}");
    let mut out = String::new();
    for (i, c) in dbg.chars().take_while(|c| c.is_alphanumeric()).enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn variant_name(key: &PipelineKey) -> String {
    let dtypes: Vec<String> = key.dtypes.iter().map(|d| d.to_string()).collect();
    format!("{:?} [{}] wg {}", key.kernel, dtypes.join(","), key.wg)
}

/// 2 × multiply-adds of a matrix product or attention dispatch, told by family name so that
/// every kernel of a family (`mul_mat`, `mul_mat_vec`, `mul_mat_id`, …) counts. A coop
/// product split along k counts its product once (its destination holds one slice per
/// split), and the sum of the splits none.
fn flops(d: &Dispatch) -> u64 {
    let ne = |i: usize| d.operands.get(i).map(|o| o.layout.ne);
    let family = family_name(&d.key.kernel);
    let splits = match d.key.kernel {
        Kernel::MulMatSplit => return 0,
        Kernel::MulMatCoop { .. } => u64::from(d.op_words[7].max(1)),
        _ => 1,
    };
    if family.starts_with("mul_mat") {
        // One dot product of length src0.ne0 per destination element.
        return match (ne(0), d.operands.last()) {
            (Some(a), Some(dst)) => 2 * a[0] * dst.layout.nelements() / splits,
            _ => 0,
        };
    }
    if family.starts_with("flash_attn") {
        // q·k and p·v for every (query, key, head): bindings q, k, v first.
        return match (ne(0), ne(1), ne(2)) {
            (Some(q), Some(k), Some(v)) => 2 * (q[0] + v[0]) * k[1] * q[1] * q[2] * q[3],
            _ => 0,
        };
    }
    0
}

/// The time of one dispatch in a profiled run.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchTime {
    pub info: DispatchInfo,
    /// Nanoseconds from its "before" to its "after" timestamp (or host submit-to-idle).
    pub ns: f64,
}

/// One profiled run of a compiled graph.
#[derive(Clone, Debug, PartialEq)]
pub struct RunProfile {
    pub clock: Clock,
    /// One entry per dispatch, in order ([`Profiling::Dispatches`]; empty for a span).
    pub dispatches: Vec<DispatchTime>,
    /// Host nanoseconds spent encoding and submitting the run's command buffers.
    pub encode_ns: f64,
    /// Nanoseconds from the first dispatch's start to the last one's end (gaps included).
    pub span_ns: f64,
}

impl RunProfile {
    /// The runs of several executables that together make one step, as one run (`None` for
    /// no run).
    pub fn merged(parts: &[RunProfile]) -> Option<RunProfile> {
        Some(RunProfile {
            clock: parts.first()?.clock,
            dispatches: parts.iter().flat_map(|p| p.dispatches.clone()).collect(),
            encode_ns: parts.iter().map(|p| p.encode_ns).sum(),
            span_ns: parts.iter().map(|p| p.span_ns).sum(),
        })
    }

    /// Sum of the dispatches' times (gaps between them excluded).
    pub fn dispatch_ns(&self) -> f64 {
        self.dispatches.iter().map(|d| d.ns).sum()
    }
}

/// Time of one kernel family, averaged over profiled runs.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyTime {
    pub family: String,
    /// Dispatches per run.
    pub dispatches: f64,
    /// Nanoseconds per run.
    pub ns: f64,
    /// Operand bytes per run.
    pub bytes: f64,
    /// FLOPs per run.
    pub flops: f64,
}

impl FamilyTime {
    /// Operand bytes per second / 1e9.
    pub fn gbps(&self) -> f64 {
        self.bytes / self.ns
    }

    /// FLOP per second / 1e9, when the family has counted FLOPs.
    pub fn gflops(&self) -> Option<f64> {
        (self.flops > 0.0).then(|| self.flops / self.ns)
    }
}

/// Per-family means over `runs`, most expensive first.
pub fn families(runs: &[RunProfile]) -> Vec<FamilyTime> {
    let mut out: Vec<FamilyTime> = Vec::new();
    for d in runs.iter().flat_map(|r| &r.dispatches) {
        let i = match out.iter().position(|f| f.family == d.info.family) {
            Some(i) => i,
            None => {
                out.push(FamilyTime {
                    family: d.info.family.clone(),
                    dispatches: 0.0,
                    ns: 0.0,
                    bytes: 0.0,
                    flops: 0.0,
                });
                out.len() - 1
            }
        };
        let f = &mut out[i];
        f.dispatches += 1.0;
        f.ns += d.ns;
        f.bytes += d.info.bytes as f64;
        f.flops += d.info.flops as f64;
    }
    let n = runs.len().max(1) as f64;
    for f in &mut out {
        f.dispatches /= n;
        f.ns /= n;
        f.bytes /= n;
        f.flops /= n;
    }
    out.sort_by(|a, b| b.ns.total_cmp(&a.ns));
    out
}

/// How the runs of a backend's executables are timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profiling {
    /// Not at all: a run encodes no query.
    #[default]
    Off,
    /// Only the run's span: one timestamp at the start of its first pass and one at the end of
    /// its last, so the run executes as it would unprofiled: a timestamp around every dispatch
    /// costs the GPU about as much as a small dispatch.
    Span,
    /// A timestamp before and after every dispatch (`dispatches` of the profile filled).
    Dispatches,
}

/// Whether the runs of a backend's executables are profiled, and the profiles they made.
#[derive(Default)]
pub(crate) struct ProfileSwitch {
    mode: AtomicU8,
    runs: Mutex<Vec<RunProfile>>,
}

impl ProfileSwitch {
    pub(crate) fn set(&self, mode: Profiling) {
        self.mode.store(mode as u8, Ordering::Relaxed);
    }

    pub(crate) fn mode(&self) -> Profiling {
        match self.mode.load(Ordering::Relaxed) {
            1 => Profiling::Span,
            2 => Profiling::Dispatches,
            _ => Profiling::Off,
        }
    }

    pub(crate) fn push(&self, p: RunProfile) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.push(p);
        }
    }

    pub(crate) fn take(&self) -> Vec<RunProfile> {
        self.runs
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}

/// The query sets and buffers of a profiled executable: two timestamps per dispatch.
pub(crate) struct Timestamps {
    sets: Vec<wgpu::QuerySet>,
    queries: u32,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Nanoseconds per tick.
    period: f64,
    /// Written inside the ordinary passes rather than as one pass per dispatch.
    pub(crate) inside_passes: bool,
}

const PER_SET: u32 = wgpu::QUERY_SET_MAX_QUERIES;

impl Timestamps {
    /// Query sets for `dispatches` dispatches (the device must have TIMESTAMP_QUERY).
    pub(crate) fn new(gpu: &Gpu, dispatches: usize) -> Result<Timestamps> {
        let queries = u32::try_from(2 * dispatches.max(1))
            .map_err(|_| Error::shape(format!("{dispatches} dispatches are too many to time")))?;
        let sets = gpu.scoped("creating timestamp query sets", || {
            (0..queries.div_ceil(PER_SET))
                .map(|s| {
                    gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                        label: Some("timestamps"),
                        ty: wgpu::QueryType::Timestamp,
                        count: (queries - s * PER_SET).min(PER_SET),
                    })
                })
                .collect::<Vec<_>>()
        })?;
        let size = Self::set_offset(sets.len() as u32);
        let resolve = buffer::create(
            gpu,
            "timestamp resolve",
            size,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            None,
        )?;
        let readback = buffer::create(
            gpu,
            "timestamp readback",
            size,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            None,
        )?;
        Ok(Timestamps {
            sets,
            queries,
            resolve,
            readback,
            period: f64::from(gpu.queue.get_timestamp_period()),
            inside_passes: gpu.caps.timestamp_query_inside_passes,
        })
    }

    /// Byte offset of set `s` in the resolve buffer (a multiple of the resolve alignment).
    fn set_offset(s: u32) -> u64 {
        u64::from(s) * u64::from(PER_SET) * wgpu::QUERY_SIZE as u64
    }

    /// The set and index of the "before" query of dispatch `i`; "after" is the next index.
    /// Pairs never straddle two sets (`PER_SET` is even).
    pub(crate) fn slot(&self, i: usize) -> (&wgpu::QuerySet, u32) {
        let q = 2 * i as u32;
        (&self.sets[(q / PER_SET) as usize], q % PER_SET)
    }

    /// Encodes the resolve of every query and its copy to the readback buffer.
    pub(crate) fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        for (s, set) in self.sets.iter().enumerate() {
            let first = s as u32 * PER_SET;
            let count = (self.queries - first).min(PER_SET);
            enc.resolve_query_set(set, 0..count, &self.resolve, Self::set_offset(s as u32));
        }
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, self.resolve.size());
    }

    /// Reads the resolved timestamps back: nanoseconds of each of the first `n` dispatches,
    /// and the span from the first "before" to the last "after".
    pub(crate) async fn read(&self, gpu: &Gpu, n: usize) -> Result<(Vec<f64>, f64)> {
        gpu.map_read(&self.readback, self.readback.size()).await?;
        let ticks: Vec<u64> = self
            .readback
            .get_mapped_range(..)
            .map(|v| bytemuck::pod_collect_to_vec(&v))
            .map_err(|e| Error::Device {
                what: format!("reading the timestamp buffer: {e}"),
            })?;
        self.readback.unmap();
        let at = |i: usize| {
            let q = 2 * i;
            let set = q / PER_SET as usize;
            ticks[set * PER_SET as usize + q % PER_SET as usize..][..2].to_vec()
        };
        let ns: Vec<f64> = (0..n)
            .map(|i| {
                let t = at(i);
                t[1].saturating_sub(t[0]) as f64 * self.period
            })
            .collect();
        let span = match n {
            0 => 0.0,
            _ => at(n - 1)[1].saturating_sub(at(0)[0]) as f64 * self.period,
        };
        Ok((ns, span))
    }
}
