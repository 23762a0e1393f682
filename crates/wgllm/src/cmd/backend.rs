//! Backend selection shared by the commands that run graphs (`--backend`, `--device`).

use std::sync::Arc;

use anyhow::Result;
use clap::{Args as ClapArgs, ValueEnum};
use wgllm_core::Backend;
use wgllm_webgpu::{
    AdapterSelector, DeviceLimits, Int8Activations, KernelShapes, ShaderChecks, WebGpuBackend,
    WebGpuConfig,
};

/// Which backend runs the graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// WGSL kernels through wgpu (Vulkan, Metal, DX12).
    Webgpu,
    /// The CPU reference backend (slow, exact; the oracle the GPU is tested against).
    Cpu,
}

/// `--int8-activations`: [`Int8Activations`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Int8Choice {
    /// f32 activations everywhere: the CPU reference's arithmetic, token for token.
    Off,
    /// Products with at least 4 MiB of weights, where the faster product pays for the extra
    /// dispatch (1B and larger models).
    Large,
    /// Every product with integer-quantized weights.
    All,
}

impl From<Int8Choice> for Int8Activations {
    fn from(c: Int8Choice) -> Int8Activations {
        match c {
            Int8Choice::Off => Int8Activations::Off,
            Int8Choice::Large => Int8Activations::Large,
            Int8Choice::All => Int8Activations::All,
        }
    }
}

/// `--coop`: whether cooperative matrices are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CoopChoice {
    /// Where the adapter offers them and they pass the start-up check.
    Auto,
    /// Never: prefill runs the tiled kernels.
    Off,
}

/// `--subgroups`: whether kernels use subgroup operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SubgroupChoice {
    /// Where the adapter offers them.
    Auto,
    /// Never: reductions go through workgroup memory, as in a browser.
    Off,
}

/// `--kernel-shapes`: [`KernelShapes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShapesChoice {
    /// CPU shapes on a CPU adapter (lavapipe, SwiftShader, WARP), GPU shapes elsewhere.
    Auto,
    /// The GPU shapes everywhere.
    Gpu,
    /// The CPU shapes everywhere.
    Cpu,
}

impl From<ShapesChoice> for KernelShapes {
    fn from(c: ShapesChoice) -> KernelShapes {
        match c {
            ShapesChoice::Auto => KernelShapes::Auto,
            ShapesChoice::Gpu => KernelShapes::Gpu,
            ShapesChoice::Cpu => KernelShapes::Cpu,
        }
    }
}

/// `--shader-checks`: [`ShaderChecks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ChecksChoice {
    /// Every runtime check wgpu has.
    Full,
    /// Bounds checks only.
    Bounds,
    /// None.
    Off,
}

/// `--limits`: [`DeviceLimits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LimitsChoice {
    /// Everything the adapter offers.
    Adapter,
    /// WebGPU's defaults, which every adapter and browser grants: 128 MiB a storage binding,
    /// 256 MiB a buffer, 8 storage buffers a kernel, 16 KiB of workgroup memory.
    Webgpu,
}

/// `--backend` and `--device` flags.
#[derive(ClapArgs, Debug, Clone)]
pub struct BackendArgs {
    /// Backend to run on.
    #[arg(long, value_enum, default_value = "webgpu")]
    pub backend: BackendKind,
    /// WebGPU adapter: an index from `wgllm devices` or part of its name (default: the best).
    #[arg(long)]
    pub device: Option<String>,
    /// Which of wgpu's runtime checks kernels keep: `bounds` (the bounds checks only: every
    /// access stays within its buffer), `full` (also loop bounding, guarded integer division and
    /// workgroup memory zeroed, wgpu's default: slower), `off` (none: an indexing bug reads or
    /// writes out of bounds).
    #[arg(long, value_enum, default_value = "bounds", value_name = "WHICH")]
    pub shader_checks: ChecksChoice,
    /// The same as `--shader-checks off`.
    #[arg(long)]
    pub unchecked_shaders: bool,
    /// Which decode products with quantized weights round their activations to int8 (per 32
    /// values, one extra dispatch) and multiply with integer dot products, as llama.cpp's CPU
    /// and CUDA backends do: ~1e-5 relative error, so greedy output can differ from f32's where
    /// two tokens nearly tie.
    #[arg(long, value_enum, default_value = "large", value_name = "WHICH")]
    pub int8_activations: Int8Choice,
    /// Cooperative matrices (tensor cores), which prefill's matrix products and attention run
    /// on where the adapter offers them (f16 operands, f32 sums): `auto` uses them once both
    /// kernels built on them pass a check at start-up (wgpu calls the feature experimental),
    /// `off` never.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub coop: CoopChoice,
    /// Subgroup operations (shuffles and reductions across a SIMD group in the decode
    /// attention, MoE router and top-k kernels; the cooperative-matrix kernels need them too):
    /// `auto` where the adapter offers them, `off` never. A browser's WebGPU runs without them
    /// (wgpu's WGSL cannot enable them there yet) and without cooperative matrices:
    /// `--subgroups off --coop off` times the kernels a browser on this GPU would run.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub subgroups: SubgroupChoice,
    /// Kernel dispatches recorded into one command buffer before it is submitted when the GPU
    /// is idle at the start of a run (a tuning knob: smaller lets the GPU start sooner on a
    /// step the host is still encoding, larger costs fewer submissions); a run queued behind
    /// running work is one submission.
    #[arg(long, default_value_t = WebGpuConfig::default().dispatches_per_submit, value_name = "N")]
    pub dispatches_per_submit: usize,
    /// Workgroup shapes: a CPU adapter (lavapipe, SwiftShader: a browser without a GPU) runs a
    /// workgroup's lanes as SIMD vectors of a few threads and switches between them at every
    /// barrier, so a workgroup costs per lane there. `cpu` shapes take few lanes (a mat-vec one
    /// SIMD vector, 4 or 8, prompts through it 8 columns at a time, attention one octet);
    /// `gpu` the many-lane tiles; `auto` the CPU shapes on a CPU adapter.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHICH")]
    pub kernel_shapes: ShapesChoice,
    /// Device limits: `adapter` opens the device with all the adapter offers; `webgpu` with
    /// WebGPU's defaults (what a browser grants unasked, and all many laptop GPUs have), so a
    /// large GPU runs the plans those devices get: tensors past 128 MiB in windows, kernels of
    /// at most 8 storage buffers, unfused where a fusion needs more.
    #[arg(long, value_enum, default_value = "adapter", value_name = "WHICH")]
    pub limits: LimitsChoice,
}

/// A backend opened with [`BackendArgs::open_counted`]: the backend, its description and, on a
/// GPU, the device's counters.
pub type Counted = (
    Box<dyn Backend>,
    String,
    Option<Arc<wgllm_webgpu::Counters>>,
);

impl BackendArgs {
    /// The WebGPU configuration these flags describe.
    pub fn webgpu_config(&self) -> WebGpuConfig {
        let adapter = match &self.device {
            None => AdapterSelector::Auto,
            Some(d) => match d.parse::<usize>() {
                Ok(i) => AdapterSelector::Index(i),
                Err(_) => AdapterSelector::Name(d.clone()),
            },
        };
        WebGpuConfig {
            adapter,
            shader_checks: match (self.unchecked_shaders, self.shader_checks) {
                (true, _) | (_, ChecksChoice::Off) => ShaderChecks::Unchecked,
                (false, ChecksChoice::Bounds) => ShaderChecks::Bounds,
                (false, ChecksChoice::Full) => ShaderChecks::Checked,
            },
            int8_activations: self.int8_activations.into(),
            cooperative_matrices: self.coop == CoopChoice::Auto,
            subgroups: self.subgroups == SubgroupChoice::Auto,
            dispatches_per_submit: self.dispatches_per_submit.max(1),
            kernel_shapes: self.kernel_shapes.into(),
            limits: match self.limits {
                LimitsChoice::Adapter => DeviceLimits::Adapter,
                LimitsChoice::Webgpu => DeviceLimits::WebGpuDefaults,
            },
            ..WebGpuConfig::default()
        }
    }

    /// Opens the chosen backend; `describe` gets a one-line description of it.
    pub fn open(&self) -> Result<(Box<dyn Backend>, String)> {
        let (b, desc) = self.open_typed()?;
        Ok(match b {
            OpenedBackend::WebGpu(b) => (Box::new(b), desc),
            OpenedBackend::Cpu(b) => (Box::new(b), desc),
        })
    }

    /// [`BackendArgs::open`] with the device's counters (a GPU's only), for load progress.
    pub fn open_counted(&self) -> Result<Counted> {
        let (b, desc) = self.open_typed()?;
        Ok(match b {
            OpenedBackend::WebGpu(b) => {
                let c = b.counters();
                (Box::new(b), desc, Some(c))
            }
            OpenedBackend::Cpu(b) => (Box::new(b), desc, None),
        })
    }

    /// [`BackendArgs::open`] keeping the concrete type (for GPU profiling).
    pub fn open_typed(&self) -> Result<(OpenedBackend, String)> {
        Ok(match self.backend {
            BackendKind::Cpu => (
                OpenedBackend::Cpu(wgllm_cpu::CpuBackend),
                "cpu (reference)".to_string(),
            ),
            BackendKind::Webgpu => {
                let b = WebGpuBackend::new(self.webgpu_config())?;
                let a = b.adapter();
                let c = b.capabilities();
                let coop = match (&c.cooperative_matrix_failure, b.uses_cooperative_matrices()) {
                    (Some(why), _) => format!(", cooperative matrices off: {why}"),
                    (None, true) => ", cooperative matrices".to_string(),
                    (None, false) => String::new(),
                };
                let subgroups = match c.subgroups {
                    true => "",
                    false => ", no subgroups",
                };
                let desc = format!(
                    "webgpu: {} ({}, {}){coop}{subgroups}",
                    a.name, a.backend, a.device_type
                );
                (OpenedBackend::WebGpu(b), desc)
            }
        })
    }
}

/// An opened backend of either kind.
pub enum OpenedBackend {
    WebGpu(WebGpuBackend),
    Cpu(wgllm_cpu::CpuBackend),
}

impl OpenedBackend {
    /// The backend as a trait object.
    pub fn as_dyn(&self) -> &dyn Backend {
        match self {
            OpenedBackend::WebGpu(b) => b,
            OpenedBackend::Cpu(b) => b,
        }
    }
}
