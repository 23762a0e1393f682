//! The one configuration struct of the WebGPU backend. Nothing in this crate reads the
//! environment; callers (the CLI) fill this struct from flags and pass it in.

/// Which adapter to open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AdapterSelector {
    /// The first discrete GPU, else integrated, else virtual, else CPU (software) adapter,
    /// preferring Vulkan/Metal/DX12 over GL for the same device.
    #[default]
    Auto,
    /// The adapter at this index of [`crate::list_adapters`].
    Index(usize),
    /// The first adapter whose name contains this text (case-insensitive).
    Name(String),
}

/// Which of wgpu's runtime checks kernels keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShaderChecks {
    /// wgpu's default robustness: every buffer and array access kept in bounds (clamped in the
    /// kernel, or by the driver's robust buffer access where the device has it), loops bounded,
    /// integer divisions guarded, workgroup memory zeroed at the start. The browser's (which
    /// enforces its own robustness whatever is asked).
    Checked,
    /// The bounds of `Checked`, without the rest: every kernel's loops end (their bounds are
    /// extents and parameters the planner sets), every divisor is an extent or a count the
    /// planner makes positive, and every kernel writes the workgroup memory it reads (the op
    /// tests hold the results to the CPU reference's). Memory-safe as `Checked` is: an index
    /// computed from any value stays clamped. The native default: the checks it drops are the
    /// ones that cost on the hot path (loop counters and guards in every inner loop).
    Bounds,
    /// Kernels are created with `create_shader_module_trusted` and
    /// `ShaderRuntimeChecks::unchecked()`: no clamping either, so an indexing bug reads or
    /// writes out of bounds. Use only with kernels the op tests cover.
    Unchecked,
}

/// Tuning and safety knobs of the WebGPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebGpuConfig {
    /// Which adapter to open.
    pub adapter: AdapterSelector,
    /// Runtime bounds checks in kernels.
    pub shader_checks: ShaderChecks,
    /// Dispatches encoded into one compute pass before it is ended and a new one begun.
    pub dispatches_per_pass: usize,
    /// Dispatches recorded into one command buffer before it is submitted, when the GPU is
    /// idle at the start of a run. Submitting a long graph in pieces lets the GPU start on the
    /// first while the CPU encodes the rest (each dispatch costs encoding time, each submit
    /// more). A run that starts while earlier work still runs is one submission.
    pub dispatches_per_submit: usize,
    /// Request cooperative matrices (tensor cores: prefill's products and attention) when the
    /// adapter offers them. wgpu calls them experimental and their use unsafe, so a backend
    /// that opens with them first runs both kernels built on them against answers the host
    /// knows (`selfcheck.rs`), and plans without them if either is wrong.
    pub cooperative_matrices: bool,
    /// Lowers the largest storage binding the backend uses below the device's
    /// `max_storage_buffer_binding_size` (never raises it). A testing and tuning knob: tests set
    /// a few KiB to exercise, on any adapter, the split of oversized get_rows tables and mul_mat
    /// weights into windows of rows that real models need on devices with a 128 MiB limit.
    pub max_binding_bytes: Option<u64>,
    /// Use SHADER_F16 when the adapter offers it. `false` makes the device behave like one
    /// without it (many browsers): f16 tensors are unsupported and only the f32 paths run, which
    /// is how the tests exercise that fallback on any adapter.
    pub shader_f16: bool,
    /// Use SUBGROUP (subgroup reductions in kernels) when the adapter offers it. `false` makes
    /// the device behave like one without it (browsers, whose WGSL needs an `enable` naga does
    /// not accept yet): the workgroup-memory reductions run instead.
    pub subgroups: bool,
    /// Which decode products (mat-vecs) with quantized weights round their activations to int8.
    pub int8_activations: Int8Activations,
    /// Workgroup shapes for a GPU or for a CPU adapter ([`KernelShapes`]).
    pub kernel_shapes: KernelShapes,
    /// The limits the device is opened with ([`DeviceLimits`]).
    pub limits: DeviceLimits,
}

impl Default for WebGpuConfig {
    fn default() -> WebGpuConfig {
        WebGpuConfig {
            adapter: AdapterSelector::Auto,
            shader_checks: match cfg!(target_arch = "wasm32") {
                true => ShaderChecks::Checked,
                false => ShaderChecks::Bounds,
            },
            dispatches_per_pass: 1024,
            dispatches_per_submit: 96,
            cooperative_matrices: true,
            max_binding_bytes: None,
            shader_f16: true,
            subgroups: true,
            int8_activations: Int8Activations::Large,
            kernel_shapes: KernelShapes::Auto,
            limits: DeviceLimits::Adapter,
        }
    }
}

/// Which limits the device is opened with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceLimits {
    /// Everything the adapter offers.
    #[default]
    Adapter,
    /// WebGPU's defaults (`wgpu::Limits::default()`), what every adapter and browser grants
    /// unasked: 128 MiB a storage binding, 256 MiB a buffer, 8 storage buffers a stage, 16 KiB
    /// of workgroup memory, 256 invocations a workgroup, no immediates (or the adapter's own
    /// where it offers less). Forced on a larger adapter, it runs the plans most GPUs get.
    WebGpuDefaults,
}

/// Which workgroup shapes the planner picks. A CPU adapter (lavapipe, SwiftShader: a browser
/// without a GPU, WARP) runs a workgroup's invocations as SIMD lanes of a few threads, and a
/// kernel with a barrier as one coroutine per SIMD group, switched at every barrier: there a
/// workgroup costs in proportion to its invocations, not to its work. So the CPU shapes take
/// few invocations (a mat-vec one SIMD vector of lanes, 4 or 8, each storing several sums;
/// attention one octet) and leave the many-lane tiles to GPUs: prompts run through the mat-vec
/// 8 columns at a time, attention through the vec kernel at any row count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelShapes {
    /// CPU shapes where the adapter says it is a CPU (`wgpu::DeviceType::Cpu`; a browser's
    /// fallback adapter), GPU shapes elsewhere.
    #[default]
    Auto,
    /// The GPU shapes everywhere (the op table runs them on lavapipe).
    Gpu,
    /// The CPU shapes everywhere.
    Cpu,
}

/// Which decode products (mat-vecs) with integer-quantized weights round their activations to
/// int8 per unit of 32 values (one more dispatch, `quant_act.wgsl`) and multiply with integer
/// dot products (`dot4I8Packed`): far fewer instructions per weight than decoding floats, so the
/// product reads its weights at a larger share of the memory bandwidth; ~1e-5 NMSE against f32
/// activations, the rounding ggml's CPU and CUDA backends apply to the same products (q8_0,
/// q8_1), and greedy output can differ from f32's where two tokens nearly tie.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Int8Activations {
    /// Never: f32 activations everywhere, the reference backend's arithmetic.
    Off,
    /// Products whose weights hold at least [`INT8_MIN_WEIGHT_BYTES`], where the faster
    /// product more than pays for the extra dispatch (the 1B and 8B Llamas' layers, large
    /// output heads; not SmolLM2-135M's layers), but q8_0 weights, whose float path is as fast.
    #[default]
    Large,
    /// Every product with integer-quantized weights (the op tests take this path).
    All,
}

/// The weight bytes from which [`Int8Activations::Large`] rounds a product's activations: the
/// extra dispatch costs a few microseconds, what the int8 product saves on ~4 MB of q4_0.
pub const INT8_MIN_WEIGHT_BYTES: u64 = 4 << 20;
