//! `wgllm ops --perf`: how fast each op-table case runs on a backend, as time per run and the
//! implied bandwidth and arithmetic rate.
//!
//! On a WebGPU device with TIMESTAMP_QUERY ([`time_case_webgpu`]) a run's time is the GPU time
//! from its first dispatch's start to its last one's end, read from timestamp queries
//! ([`crate::profile`]), averaged over `reps` runs; the inputs are uploaded once, before the
//! first. Otherwise ([`time_case`]) it is timed on the host around `reps` back-to-back runs
//! followed by one read of the first output (the read waits for the queue, so the GPU work is
//! inside the timed region; one extra readback is included).
//! Bytes are those of the graph's leaves and outputs — what a kernel must read and write at
//! least — so GB/s is a lower bound on achieved bandwidth. FLOPs are counted for matrix products
//! and attention only. On request `wgllm ops --large` also gets each kernel family's own time
//! ([`Perf::families`]), from runs with a timestamp before and after every dispatch.

use std::time::{Duration, Instant};

use wgllm_core::{Backend, Executable, Graph, Op, Result, TensorId};

use super::{Built, Case, Rng};
use crate::profile::{families, Clock, FamilyTime};
use crate::{WebGpuBackend, WebGpuExecutable};

/// Timing of one case.
#[derive(Clone, Debug)]
pub struct Perf {
    /// Seconds per run.
    pub seconds: f64,
    /// Bytes of leaves and outputs.
    pub bytes: u64,
    /// Floating-point operations of matrix products and attention (0 when none).
    pub flops: u64,
    /// What measured `seconds`.
    pub clock: Clock,
    /// With [`time_case_webgpu`]'s `by_family` and two dispatches or more: each kernel
    /// family's own time a run (per-dispatch GPU timestamps), most expensive first.
    pub families: Vec<FamilyTime>,
}

impl Perf {
    /// Bytes per second / 1e9.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }

    /// FLOP per second / 1e9.
    pub fn gflops(&self) -> f64 {
        self.flops as f64 / self.seconds / 1e9
    }
}

/// Multiply-adds × 2 of the matrix products and attention in `graph`.
pub fn flops(graph: &Graph) -> u64 {
    graph
        .nodes()
        .iter()
        .map(|n| match n.op {
            Op::MulMat | Op::MulMatId => {
                let k = n.src(0).map_or(0, |a| graph.ne(a)[0]);
                2 * k * n.layout.nelements()
            }
            Op::FlashAttnExt { .. } => {
                let (q, k) = match (n.src(0), n.src(1)) {
                    (Ok(q), Ok(k)) => (graph.ne(q), graph.ne(k)),
                    _ => return 0,
                };
                // q·k and p·v per (query, key, head): 2·d + 2·dv ≈ 4·d.
                4 * q[0] * k[1] * q[1] * q[2] * q[3]
            }
            _ => 0,
        })
        .sum()
}

/// Bytes of the graph's leaves (inputs, weights, states) and outputs; of a leaf of experts that
/// mul_mat_id multiplies, only the experts its ids can pick (one per id, at most all).
pub fn bytes(graph: &Graph) -> u64 {
    let leaves: u64 = graph
        .nodes()
        .iter()
        .filter(|n| n.op.is_leaf())
        .map(|n| n.span_bytes())
        .sum();
    let unpicked: u64 = graph
        .nodes()
        .iter()
        .filter(|n| n.op == Op::MulMatId)
        .filter_map(|n| Some((n.src(0).ok()?, n.src(2).ok()?)))
        .filter(|&(w, _)| graph.node(w).op.is_leaf())
        .map(|(w, ids)| {
            let full = graph.node(w).span_bytes();
            let experts = graph.ne(w)[2].max(1);
            let picked = (graph.ne(ids)[0] * graph.ne(ids)[1]).min(experts);
            full - full / experts * picked
        })
        .sum();
    leaves - unpicked
        + graph
            .outputs()
            .iter()
            .map(|&t| graph.node(t).span_bytes())
            .sum::<u64>()
}

/// Builds `case` and its inputs.
fn build(case: &Case, seed: u64) -> Result<(Graph, Built)> {
    let mut graph = Graph::new();
    let mut rng = Rng::new(seed);
    let built = (case.build)(&mut graph, &mut rng)?;
    Ok((graph, built))
}

/// Builds `case`, compiles it on `backend`, runs it once to warm up, then times `reps` runs on
/// the host clock.
pub fn time_case(backend: &dyn Backend, case: &Case, seed: u64, reps: usize) -> Result<Perf> {
    let (graph, built) = build(case, seed)?;
    let mut exe = backend.compile(&graph)?;
    for (t, data) in &built.states {
        exe.write(*t, data)?;
    }
    let inputs: Vec<(TensorId, &[u8])> = built.inputs.iter().map(|(t, d)| (*t, &d[..])).collect();
    let first = graph.outputs().first().copied();
    exe.run(&inputs)?;
    if let Some(o) = first {
        exe.read(o)?;
    }
    let reps = reps.max(1);
    let t0 = Instant::now();
    for _ in 0..reps {
        exe.run(&inputs)?;
    }
    if let Some(o) = first {
        exe.read(o)?;
    }
    Ok(Perf {
        seconds: t0.elapsed().as_secs_f64() / reps as f64,
        bytes: bytes(&graph),
        flops: flops(&graph),
        clock: Clock::Host,
        families: Vec::new(),
    })
}

/// GPU time the span-timed warm-up runs take at least (within [`WARM_UP_RUNS`] runs).
const WARM_UP: Duration = Duration::from_millis(200);

/// Runs that wait for [`WARM_UP`] at most: a span that reads 0 (a graph with no dispatch,
/// timestamps resolved to 0) never adds up to it.
const WARM_UP_RUNS: usize = 10_000;

/// Wall time of warm-up runs that [`Timed::warm_up`] takes at least where a benchmark follows
/// host work of seconds: a GPU idle that long drops its clocks and needs about a second of load
/// to climb back, and runs timed inside the climb read slow (bench/results/HISTORY.md, "clock
/// ramp after idle").
pub const CLOCK_RAMP: Duration = Duration::from_millis(1500);

/// A case compiled on a WebGPU backend with its states written, timed run after run on its
/// span ([`WebGpuExecutable::run_span`]: GPU timestamps, else the host clock around each run
/// and its wait): what [`time_case_webgpu`] and the criterion benchmarks
/// (`benches/kernels.rs`) time.
pub struct Timed {
    exe: WebGpuExecutable,
    /// Bytes of the graph's leaves and outputs ([`bytes`]).
    pub bytes: u64,
    /// Matrix-product and attention FLOPs ([`flops`]).
    pub flops: u64,
}

impl Timed {
    /// Builds `case` from `seed`, compiles it on `backend`, writes its states and runs it once,
    /// which uploads its inputs: the timed runs reuse them ([`WebGpuExecutable::rerun_span`],
    /// [`WebGpuExecutable::rerun_profiled`]).
    pub fn new(backend: &WebGpuBackend, case: &Case, seed: u64) -> Result<Timed> {
        let (graph, built) = build(case, seed)?;
        let mut exe = backend.compile_webgpu(&graph)?;
        for (t, data) in &built.states {
            exe.write(*t, data)?;
        }
        let inputs: Vec<(TensorId, &[u8])> =
            built.inputs.iter().map(|(t, d)| (*t, &d[..])).collect();
        exe.run_span(&inputs)?;
        Ok(Timed {
            exe,
            bytes: bytes(&graph),
            flops: flops(&graph),
        })
    }

    /// Runs the case until the runs took at least [`WARM_UP`] of GPU time and `wall` of wall
    /// time, not once: a GPU idle while the host worked starts slow (see [`CLOCK_RAMP`]).
    pub fn warm_up(&mut self, wall: Duration) -> Result<()> {
        let start = Instant::now();
        let (mut gpu, mut runs) = (0.0, 0);
        while (gpu < WARM_UP.as_secs_f64() && runs < WARM_UP_RUNS) || start.elapsed() < wall {
            gpu += self.seconds(1)?;
            runs += 1;
        }
        Ok(())
    }

    /// Dispatches a run.
    pub fn dispatch_count(&self) -> usize {
        self.exe.dispatch_count()
    }

    /// Each kernel family's time a run over `reps` runs on the uploaded inputs, each dispatch
    /// timed on its own ([`WebGpuExecutable::rerun_profiled`]: GPU timestamps before and after
    /// it, else the host clock around its submission and wait).
    pub fn families(&mut self, reps: usize) -> Result<Vec<FamilyTime>> {
        let runs = (0..reps.max(1))
            .map(|_| self.exe.rerun_profiled())
            .collect::<Result<Vec<_>>>()?;
        Ok(families(&runs))
    }

    /// Seconds of `reps` runs on the uploaded inputs, each timed on its span, summed.
    pub fn seconds(&mut self, reps: usize) -> Result<f64> {
        let mut ns = 0.0;
        for _ in 0..reps {
            ns += self.exe.rerun_span()?.span_ns;
        }
        Ok(ns / 1e9)
    }
}

/// [`time_case`] with GPU timestamps when `backend`'s device has TIMESTAMP_QUERY: a warm-up
/// ([`Timed::warm_up`], at least `warm_wall` of wall time), then the mean GPU span of `reps`
/// span-timed runs, and with `by_family` and two dispatches or more, each kernel family's own
/// time over `reps` more runs timed dispatch by dispatch (`Perf::families`). Falls back to
/// [`time_case`] without it.
pub fn time_case_webgpu(
    backend: &WebGpuBackend,
    case: &Case,
    seed: u64,
    reps: usize,
    by_family: bool,
    warm_wall: Duration,
) -> Result<Perf> {
    if !backend.capabilities().timestamp_query {
        return time_case(backend, case, seed, reps);
    }
    let mut timed = Timed::new(backend, case, seed)?;
    timed.warm_up(warm_wall)?;
    let reps = reps.max(1);
    let seconds = timed.seconds(reps)? / reps as f64;
    let families = match by_family && timed.dispatch_count() >= 2 {
        true => timed.families(reps)?,
        false => Vec::new(),
    };
    Ok(Perf {
        seconds,
        bytes: timed.bytes,
        flops: timed.flops,
        clock: Clock::GpuTimestamps,
        families,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WebGpuConfig;

    /// A case of several dispatches (a split decode attention and its combine) gets one time
    /// per kernel family, covering every dispatch, only when asked for.
    #[test]
    fn families_time_every_dispatch_of_a_case_when_asked() {
        let backend = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let case = super::super::cases()
            .into_iter()
            .filter(|c| c.name.starts_with("FLASH_ATTN_EXT"))
            .find(|c| Timed::new(&backend, c, 1).is_ok_and(|t| t.dispatch_count() >= 2))
            .expect("a FLASH case of two dispatches or more");
        let dispatches = Timed::new(&backend, &case, 1).unwrap().dispatch_count();
        let plain = time_case_webgpu(&backend, &case, 1, 2, false, Duration::ZERO).unwrap();
        assert!(plain.families.is_empty());
        let p = time_case_webgpu(&backend, &case, 1, 2, true, Duration::ZERO).unwrap();
        if !backend.capabilities().timestamp_query {
            assert!(p.families.is_empty(), "timed on the host: no families");
            return;
        }
        assert!(p.families.len() >= 2, "{:?}", p.families);
        let counted: f64 = p.families.iter().map(|f| f.dispatches).sum();
        assert_eq!(counted, dispatches as f64);
        assert!(p.families.iter().all(|f| f.ns >= 0.0 && f.bytes > 0.0));
        assert!(p.families.iter().map(|f| f.ns).sum::<f64>() > 0.0);
    }
}
