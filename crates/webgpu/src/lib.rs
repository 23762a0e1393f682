//! wgllm-webgpu: the wgpu backend. Runs `wgllm_core` graphs on any GPU wgpu reaches (Vulkan,
//! Metal, DX12, GL), and on lavapipe in CI.
//!
//! ## Design
//! - [`device`]: adapter listing and choice, requested features and limits, device errors as
//!   values ([`device::Gpu::scoped`]).
//! - [`config`]: the one [`WebGpuConfig`]; nothing reads the environment.
//! - `buffer`: creating buffers within the device's limits, padded writes, and the
//!   [`MemoryReport`] of what we allocated.
//! - `arena`: the buffers of one compiled graph: weights (uploaded once, quantized blocks
//!   as-is), the planned activation arena, states, inputs, staging.
//! - `weights`: resident weights, uploaded piece by piece before any graph names them
//!   ([`WebGpuBackend::upload_weight`]; a model streamed to the GPU).
//! - [`kernels`]: the kernel library, one WGSL file per op family and the Rust beside it that
//!   specializes it (`{{NAME}}` substitution, `#if` blocks) into variants keyed by a typed
//!   [`kernels::PipelineKey`], with each family's facts; it knows nothing of the planner.
//! - `ops/`: per op family, the node → dispatches planner; its exhaustive match is `supports`.
//! - `pipelines`: the pipeline cache and the single bind-group builder.
//! - `executable`: compile once (pipelines, bind groups, parameter slots), then `run` only
//!   writes inputs and encodes.
//! - `selfcheck`: the cooperative-matrix kernels checked at open before the planner uses them.
//! - [`profile`]: opt-in per-dispatch GPU timing (timestamp queries) of compiled graphs.
//! - [`testing`]: the op case table and the CPU-vs-GPU runner shared by tests and `wgllm ops`.
//!
//! Adding an op: write `kernels/<family>.wgsl`, a `Kernel` variant and its configuration in
//! `kernels/` (`source.rs`, or the family's own file), a planner in `ops/<family>.rs` routed from `ops::plan_node`, and cases in
//! `testing`.

mod arena;
mod buffer;
pub mod config;
pub mod device;
mod executable;
pub mod kernels;
mod ops;
mod pipelines;
pub mod profile;
mod selfcheck;
pub mod testing;
#[cfg(test)]
mod translate;
mod weights;

use std::sync::Arc;

use wgllm_core::backend::check_shared_states;
use wgllm_core::{Backend, Executable, Graph, Result, TensorId};

pub use buffer::MemoryReport;
pub use config::{
    AdapterSelector, DeviceLimits, Int8Activations, KernelShapes, ShaderChecks, WebGpuConfig,
    INT8_MIN_WEIGHT_BYTES,
};
#[cfg(not(target_arch = "wasm32"))]
pub use device::list_adapters;
pub use device::{list_adapters_async, AdapterSummary, Capabilities, Counters};
pub use executable::WebGpuExecutable;

/// The WebGPU backend: one opened device and its pipeline cache.
pub struct WebGpuBackend {
    gpu: Arc<device::Gpu>,
    config: WebGpuConfig,
    pipelines: pipelines::Pipelines,
    profiling: Arc<profile::ProfileSwitch>,
    /// Weights uploaded before graphs name them (`upload_weight`); boxed, which keeps the
    /// backend small enough to sit in an enum beside the CPU backend.
    resident: Box<weights::ResidentStore>,
}

impl WebGpuBackend {
    /// Opens the adapter the config selects.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(config: WebGpuConfig) -> Result<WebGpuBackend> {
        pollster::block_on(WebGpuBackend::new_async(config))
    }

    /// [`WebGpuBackend::new`] without blocking: the only way in the browser.
    // In the browser wgpu's handles are single-threaded (not Send), and so is everything here.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub async fn new_async(config: WebGpuConfig) -> Result<WebGpuBackend> {
        let gpu = device::Gpu::open_async(&config).await?;
        let mut backend = WebGpuBackend {
            gpu: Arc::new(gpu),
            config,
            pipelines: pipelines::Pipelines::default(),
            profiling: Arc::default(),
            resident: Box::default(),
        };
        if ops::coop_f16(&backend.gpu.caps) {
            if let Some(why) = selfcheck::cooperative_matrices(&backend).await {
                // The check's executables are gone, so the device is ours alone again.
                let gpu = Arc::get_mut(&mut backend.gpu).ok_or_else(|| {
                    wgllm_core::Error::graph("the cooperative-matrix check kept the device")
                })?;
                gpu.caps.cooperative_matrix = false;
                gpu.caps.cooperative_matrix_failure = Some(why);
            }
        }
        Ok(backend)
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.gpu.adapter
    }

    /// What this backend has put on its device so far (weights, buffers, kernels), shared: a
    /// clone keeps counting while a model loads on another thread.
    pub fn counters(&self) -> Arc<device::Counters> {
        self.gpu.counters.clone()
    }

    /// Features and limits of the opened device.
    pub fn capabilities(&self) -> &Capabilities {
        &self.gpu.caps
    }

    /// Whether prefill runs on cooperative matrices: enabled, with a configuration their
    /// kernels take, and the check at open passed.
    pub fn uses_cooperative_matrices(&self) -> bool {
        ops::coop_f16(&self.gpu.caps)
    }

    /// Profiles every run of this backend's executables (made before or after) as `mode` says,
    /// keeping the profiles for [`WebGpuBackend::take_profiles`]. Off by default; when off a run
    /// encodes no timestamp query.
    pub fn set_profiling(&self, mode: profile::Profiling) {
        self.profiling.set(mode);
    }

    /// The profiles of the runs made while profiling was on, oldest first; clears them.
    pub fn take_profiles(&self) -> Vec<profile::RunProfile> {
        self.profiling.take()
    }

    /// [`Backend::compile`] with the concrete executable (for its memory report).
    pub fn compile_webgpu(&self, graph: &Graph) -> Result<WebGpuExecutable> {
        let mut v = self.compile_shared_webgpu(&[graph])?;
        v.pop()
            .ok_or_else(|| wgllm_core::Error::graph("no executable compiled"))
    }

    /// [`Backend::compile_shared`] with the concrete executables.
    ///
    /// Every graph is planned, and every weight checked against the largest buffer, before
    /// anything is uploaded: a model this device cannot hold fails at once, naming the cause.
    pub fn compile_shared_webgpu(&self, graphs: &[&Graph]) -> Result<Vec<WebGpuExecutable>> {
        check_shared_states(graphs)?;
        let plans = graphs
            .iter()
            .map(|g| ops::plan_graph(g, &self.gpu.caps))
            .collect::<Result<Vec<_>>>()?;
        for graph in graphs {
            buffer::check_weights_fit(&self.gpu, graph)?;
        }
        let mut shared = arena::Shared::new(self.resident.snapshot());
        let mut out = Vec::with_capacity(graphs.len());
        for (graph, planned) in graphs.iter().zip(plans) {
            out.push(WebGpuExecutable::new(
                self.gpu.clone(),
                self.profiling.clone(),
                &self.pipelines,
                &self.config,
                graph,
                planned,
                &mut shared,
            )?);
        }
        Ok(out)
    }
}

impl Backend for WebGpuBackend {
    fn name(&self) -> String {
        "webgpu".into()
    }

    fn supports(&self, graph: &Graph, t: TensorId) -> Result<()> {
        ops::plan_node(graph, t, &self.gpu.caps).map(|_| ())
    }

    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        Ok(Box::new(self.compile_webgpu(graph)?))
    }

    fn compile_shared(&self, graphs: &[&Graph]) -> Result<Vec<Box<dyn Executable>>> {
        Ok(self
            .compile_shared_webgpu(graphs)?
            .into_iter()
            .map(|e| Box::new(e) as Box<dyn Executable>)
            .collect())
    }
}
