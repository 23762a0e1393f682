//! Adapters and the opened device: enumeration (for `wgllm devices`), selection by index or name,
//! the features and limits we request, and capture of device errors as values.
//!
//! wgpu reports validation, out-of-memory and internal errors either to an error scope or, when
//! none is open, to the uncaptured-error handler (whose default panics). We open scopes around
//! everything we create or submit and install a handler that records anything else, so a device
//! problem becomes `Error::Device` and never aborts the process.
//!
//! In the browser (`wasm32`, wgpu's WebGPU backend) nothing may block: [`Gpu::open_async`] opens
//! the device, [`Gpu::map_read`] awaits a readback, and error scopes are not awaited — the
//! uncaptured-error handler records every error, and the next readback reports it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use wgllm_core::{Error, Result};

use crate::config::{AdapterSelector, DeviceLimits, KernelShapes, WebGpuConfig};

/// How to get a driver when no adapter is found.
const DRIVER_HINT: &str = "install a Vulkan, Metal or DX12 driver for your GPU; for a software \
     adapter on Linux: `apt-get install mesa-vulkan-drivers libvulkan1` (lavapipe)";

/// One adapter as `wgllm devices` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterSummary {
    /// Position in [`list_adapters`]; what [`AdapterSelector::Index`] refers to.
    pub index: usize,
    pub name: String,
    /// `"Vulkan"`, `"Metal"`, `"Dx12"`, `"Gl"`.
    pub backend: String,
    pub driver: String,
    pub driver_info: String,
    /// `"DiscreteGpu"`, `"IntegratedGpu"`, `"VirtualGpu"`, `"Cpu"`, `"Other"`.
    pub device_type: String,
    /// The features this crate cares about that the adapter offers.
    pub features: Vec<&'static str>,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub subgroup_sizes: (u32, u32),
}

/// What the opened device can do: the features we enabled and the limits we got.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// `f16` in WGSL (`enable f16;`): needed for f16 activations and caches.
    pub shader_f16: bool,
    /// Subgroup builtins, and the subgroup size range.
    pub subgroups: bool,
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    /// GPU timestamps between and inside passes.
    pub timestamp_query: bool,
    pub timestamp_query_inside_passes: bool,
    /// Immediate data (push constants).
    pub immediates: bool,
    /// The adapter offers cooperative matrices; `cooperative_matrix` says whether we enabled them.
    pub cooperative_matrix_offered: bool,
    pub cooperative_matrix: bool,
    /// Why cooperative matrices are off although enabled: the check at open (`selfcheck.rs`)
    /// found a kernel on them wrong on this device.
    pub cooperative_matrix_failure: Option<String>,
    /// The adapter's cooperative matrix configurations (sizes and operand types).
    pub cooperative_matrix_configs: Vec<wgpu::CooperativeMatrixProperties>,
    /// The limits the device was created with ([`WebGpuConfig::limits`]).
    pub limits: wgpu::Limits,
    /// [`WebGpuConfig::int8_activations`].
    pub int8_activations: crate::Int8Activations,
    /// Kernels take the workgroup shapes for a CPU adapter ([`crate::KernelShapes`]).
    pub cpu_shapes: bool,
    /// Largest storage binding the planner uses: `limits.max_storage_buffer_binding_size`, or
    /// [`WebGpuConfig::max_binding_bytes`] when that is lower.
    pub binding_limit: u64,
}

/// Features the backend uses when offered, with their display names.
const WANTED: &[(wgpu::Features, &str)] = &[
    (wgpu::Features::SHADER_F16, "shader-f16"),
    (wgpu::Features::SUBGROUP, "subgroup"),
    (wgpu::Features::TIMESTAMP_QUERY, "timestamp-query"),
    (
        wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
        "timestamp-query-inside-passes",
    ),
    (wgpu::Features::IMMEDIATES, "immediates"),
    (
        wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
        "cooperative-matrix",
    ),
];

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::all();
    wgpu::Instance::new(desc)
}

/// Every adapter of `instance`; in the browser, the one `navigator.gpu` offers.
fn enumerate(instance: &wgpu::Instance) -> impl Future<Output = Vec<wgpu::Adapter>> {
    instance.enumerate_adapters(wgpu::Backends::all())
}

fn summarize(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let limits = adapter.limits();
    let offered = adapter.features();
    AdapterSummary {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend),
        driver: info.driver,
        driver_info: info.driver_info,
        device_type: format!("{:?}", info.device_type),
        features: WANTED
            .iter()
            .filter(|(f, _)| offered.contains(*f))
            .map(|(_, n)| *n)
            .collect(),
        max_buffer_size: limits.max_buffer_size,
        max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
        max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
        subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
    }
}

/// Every adapter wgpu finds, in a stable order (what [`AdapterSelector::Index`] counts).
#[cfg(not(target_arch = "wasm32"))]
pub fn list_adapters() -> Vec<AdapterSummary> {
    pollster::block_on(list_adapters_async())
}

/// [`list_adapters`] without blocking (the browser's way).
pub async fn list_adapters_async() -> Vec<AdapterSummary> {
    enumerate(&instance())
        .await
        .iter()
        .enumerate()
        .map(|(i, a)| summarize(i, a))
        .collect()
}

/// Lower is better: real GPUs first, native APIs before GL.
fn preference(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let ty = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::Gl => 1,
        _ => 2,
    };
    (ty, backend)
}

fn no_adapter(what: &str, summaries: &[AdapterSummary]) -> Error {
    let found = if summaries.is_empty() {
        "no adapters at all".to_string()
    } else {
        summaries
            .iter()
            .map(|s| {
                format!(
                    "[{}] {} ({}, {})",
                    s.index, s.name, s.backend, s.device_type
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Error::Device {
        what: format!("{what}; found: {found}. To get a driver: {DRIVER_HINT}"),
    }
}

fn choose(adapters: Vec<wgpu::Adapter>, selector: &AdapterSelector) -> Result<wgpu::Adapter> {
    let summaries: Vec<AdapterSummary> = adapters
        .iter()
        .enumerate()
        .map(|(i, a)| summarize(i, a))
        .collect();
    let pos = match selector {
        AdapterSelector::Auto => {
            (0..adapters.len()).min_by_key(|&i| preference(&adapters[i].get_info()))
        }
        AdapterSelector::Index(i) => (*i < adapters.len()).then_some(*i),
        AdapterSelector::Name(n) => {
            let n = n.to_lowercase();
            summaries
                .iter()
                .position(|s| s.name.to_lowercase().contains(&n))
        }
    };
    match pos {
        Some(i) => Ok(adapters.into_iter().nth(i).expect("index from this list")),
        None => Err(no_adapter(
            &match selector {
                AdapterSelector::Auto => "no WebGPU adapter found".to_string(),
                AdapterSelector::Index(i) => format!("no adapter with index {i}"),
                AdapterSelector::Name(n) => format!("no adapter whose name contains '{n}'"),
            },
            &summaries,
        )),
    }
}

/// Device errors seen outside any error scope (and device loss), drained at sync points.
#[derive(Clone, Default)]
struct ErrorSink(Arc<Mutex<Vec<String>>>);

impl ErrorSink {
    fn push(&self, what: String) {
        if let Ok(mut v) = self.0.lock() {
            v.push(what);
        }
    }

    fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// An opened device with its queue, capabilities and error capture.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) caps: Capabilities,
    pub(crate) adapter: AdapterSummary,
    errors: ErrorSink,
    pub(crate) counters: Arc<Counters>,
}

/// What this backend has put on its device so far, read while a model loads (a progress bar)
/// and after (what the load took). Counts only grow: freed buffers are not subtracted.
#[derive(Debug, Default)]
pub struct Counters {
    weight_bytes: AtomicU64,
    allocated_bytes: AtomicU64,
    kernels: AtomicU64,
}

impl Counters {
    /// Bytes of weights written to the device.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of every buffer allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes.load(Ordering::Relaxed)
    }

    /// Kernels (compute pipelines) compiled.
    pub fn kernels(&self) -> u64 {
        self.kernels.load(Ordering::Relaxed)
    }

    pub(crate) fn add_weight_bytes(&self, n: u64) {
        self.weight_bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_allocated(&self, n: u64) {
        self.allocated_bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_kernel(&self) {
        self.kernels.fetch_add(1, Ordering::Relaxed);
    }
}

impl Gpu {
    /// Opens the adapter `config.adapter` selects with its real limits and the useful features.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(config: &WebGpuConfig) -> Result<Gpu> {
        pollster::block_on(Gpu::open_async(config))
    }

    /// [`Gpu::open`] without blocking: the only way in the browser.
    pub async fn open_async(config: &WebGpuConfig) -> Result<Gpu> {
        let instance = instance();
        let adapters = enumerate(&instance).await;
        let adapter = choose(adapters, &config.adapter)?;
        let summary = summarize(0, &adapter);
        let offered = adapter.features();
        let mut features = wgpu::Features::empty();
        for (f, _) in WANTED {
            let experimental = *f == wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            let declined = *f == wgpu::Features::SHADER_F16 && !config.shader_f16
                || *f == wgpu::Features::SUBGROUP && !config.subgroups
                || *f == wgpu::Features::IMMEDIATES
                    && config.limits == DeviceLimits::WebGpuDefaults;
            if offered.contains(*f) && (!experimental || config.cooperative_matrices) && !declined {
                features |= *f;
            }
        }
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: wgpu's caveat is that experimental APIs may be wrong on some drivers; only
            // reachable with `WebGpuConfig::cooperative_matrices`, and the backend checks the
            // kernels built on them before planning any (`selfcheck.rs`).
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let limits = match config.limits {
            DeviceLimits::Adapter => adapter.limits(),
            DeviceLimits::WebGpuDefaults => {
                wgpu::Limits::default().or_worse_values_from(&adapter.limits())
            }
        };
        let desc = wgpu::DeviceDescriptor {
            label: Some("wgllm"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = adapter
            .request_device(&desc)
            .await
            .map_err(|e| Error::Device {
                what: format!("requesting a device from '{}': {e}", summary.name),
            })?;
        let errors = ErrorSink::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| sink.push(e.to_string())));
        let sink = errors.clone();
        device.set_device_lost_callback(move |reason, msg| {
            sink.push(format!("device lost ({reason:?}): {msg}"));
        });
        let info = adapter.get_info();
        let caps = Capabilities {
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            subgroup_min_size: info.subgroup_min_size,
            subgroup_max_size: info.subgroup_max_size,
            timestamp_query: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            timestamp_query_inside_passes: features
                .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
            immediates: features.contains(wgpu::Features::IMMEDIATES),
            cooperative_matrix_offered: offered
                .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
            cooperative_matrix: features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
            cooperative_matrix_failure: None,
            cooperative_matrix_configs: adapter.cooperative_matrix_properties(),
            int8_activations: config.int8_activations,
            cpu_shapes: match config.kernel_shapes {
                KernelShapes::Auto => info.device_type == wgpu::DeviceType::Cpu,
                KernelShapes::Gpu => false,
                KernelShapes::Cpu => true,
            },
            binding_limit: config
                .max_binding_bytes
                .map_or(limits.max_storage_buffer_binding_size, |b| {
                    b.min(limits.max_storage_buffer_binding_size)
                }),
            limits,
        };
        Ok(Gpu {
            device,
            queue,
            caps,
            adapter: summary,
            errors,
            counters: Arc::default(),
        })
    }

    /// Whether earlier submissions are still running. Natively a non-blocking poll (which also
    /// runs the callbacks of finished work); the browser cannot tell, so there it says no.
    pub(crate) fn busy(&self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        {
            !matches!(self.device.poll(wgpu::PollType::Poll), Ok(s) if s.is_queue_empty())
        }
        #[cfg(target_arch = "wasm32")]
        {
            false
        }
    }

    /// Runs `f` inside validation, out-of-memory and internal error scopes; any error they catch
    /// (or that reached the uncaptured handler meanwhile) becomes `Error::Device` naming `what`.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T> {
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let errs: Vec<String> = [validation.pop(), oom.pop(), internal.pop()]
            .into_iter()
            .filter_map(|fut| pollster::block_on(fut).map(|e| e.to_string()))
            .collect();
        self.check(what, errs).map(|()| out)
    }

    /// Runs `f`. The browser's error scopes resolve only on a later turn of its event loop, so
    /// here every error goes to the uncaptured handler and is reported by the next readback (or
    /// this call, when it already arrived).
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T> {
        let out = f();
        self.check(what, Vec::new()).map(|()| out)
    }

    /// `Err(Error::Device)` naming `what` with `errs` and the errors recorded since last checked.
    fn check(&self, what: &str, mut errs: Vec<String>) -> Result<()> {
        errs.extend(self.errors.take());
        match errs.is_empty() {
            true => Ok(()),
            false => Err(Error::Device {
                what: format!("{what}: {}", errs.join("; ")),
            }),
        }
    }

    /// Blocks until all submitted work is done, surfacing device loss and stray errors.
    pub(crate) fn wait(&self, what: &str) -> Result<()> {
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        self.check(
            what,
            polled.err().map(|e| e.to_string()).into_iter().collect(),
        )
    }

    /// Maps the first `len` bytes of `buffer` for reading once the GPU has written them. Natively
    /// this waits for the device; in the browser it yields to the event loop until the mapping
    /// is done. Device errors recorded meanwhile are reported as `Error::Device`.
    pub(crate) async fn map_read(&self, buffer: &wgpu::Buffer, len: u64) -> Result<()> {
        self.map_read_after(buffer, len, None).await
    }

    /// [`Gpu::map_read`] waiting natively only for submission `after` (and those before it),
    /// not for work queued since: the way to read step `t` while step `t + 1` runs.
    pub(crate) async fn map_read_after(
        &self,
        buffer: &wgpu::Buffer,
        len: u64,
        after: Option<wgpu::SubmissionIndex>,
    ) -> Result<()> {
        let done: Arc<Mutex<MapState>> = Arc::default();
        let state = done.clone();
        buffer.map_async(wgpu::MapMode::Read, 0..len, move |r| {
            if let Ok(mut s) = state.lock() {
                s.result = Some(r.map_err(|e| e.to_string()));
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
            }
        });
        // A no-op in the browser, which maps on its own.
        let polled = self.device.poll(wgpu::PollType::Wait {
            submission_index: after,
            timeout: None,
        });
        self.check(
            "waiting for the GPU",
            polled.err().map(|e| e.to_string()).into_iter().collect(),
        )?;
        let mapped = std::future::poll_fn(|cx| match done.lock() {
            Ok(mut s) => match s.result.take() {
                Some(r) => Poll::Ready(r),
                None => {
                    s.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            },
            Err(_) => Poll::Ready(Err("the mapping state was poisoned".to_string())),
        })
        .await;
        self.check("reading back", Vec::new())?;
        mapped.map_err(|e| Error::Device {
            what: format!("mapping a readback buffer: {e}"),
        })
    }
}

/// Completion of one `map_async`: its result, and the task to wake when it arrives.
#[derive(Default)]
struct MapState {
    result: Option<std::result::Result<(), String>>,
    waker: Option<Waker>,
}
