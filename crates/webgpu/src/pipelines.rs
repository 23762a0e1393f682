//! Compiled pipelines cached under their [`PipelineKey`], the bind-group layouts they share, and
//! the one function that builds bind groups from an ordered list of bindings.
//!
//! Layout of every kernel's group 0: binding 0 is the dispatch's parameter slot (uniform),
//! bindings 1..=n the storage operands in order. All storage bindings are `read_write`: wgpu
//! rejects a buffer bound both read-only and writable in one dispatch, and a source and a
//! destination often share the arena.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Mutex;

use wgllm_core::{Error, Result};

use crate::config::ShaderChecks;
use crate::device::Gpu;
use crate::kernels::{self, PipelineKey, PARAM_BYTES};

/// A byte range of a buffer bound as one storage operand.
pub(crate) struct Window<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

/// The pipeline cache of one device.
#[derive(Default)]
pub(crate) struct Pipelines {
    /// Bind-group layout per number of storage bindings and read-only mask
    /// ([`kernels::read_only`]).
    layouts: Mutex<HashMap<(usize, u32), (wgpu::BindGroupLayout, wgpu::PipelineLayout)>>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
}

fn poisoned<T>(_: T) -> Error {
    Error::Device {
        what: "pipeline cache lock poisoned by an earlier panic".into(),
    }
}

impl Pipelines {
    fn layout(
        &self,
        gpu: &Gpu,
        n: usize,
        read_only: u32,
    ) -> Result<(wgpu::BindGroupLayout, wgpu::PipelineLayout)> {
        let mut layouts = self.layouts.lock().map_err(poisoned)?;
        if let Some(l) = layouts.get(&(n, read_only)) {
            return Ok(l.clone());
        }
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: NonZeroU64::new(PARAM_BYTES),
            },
            count: None,
        }];
        entries.extend((1..=n as u32).map(|binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: read_only & (1 << (binding - 1)) != 0,
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }));
        let made = gpu.scoped("creating a bind group layout", || {
            let bgl = gpu
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("wgllm kernel"),
                    entries: &entries,
                });
            let pl = gpu
                .device
                .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some("wgllm kernel"),
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
            (bgl, pl)
        })?;
        layouts.insert((n, read_only), made.clone());
        Ok(made)
    }

    /// The pipeline for `key` and its bind-group layout, compiled on first use.
    pub(crate) fn get(
        &self,
        gpu: &Gpu,
        key: &PipelineKey,
        checks: ShaderChecks,
    ) -> Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout)> {
        let (bgl, pl) = self.layout(gpu, key.dtypes.len(), kernels::read_only(key))?;
        let mut pipelines = self.pipelines.lock().map_err(poisoned)?;
        if let Some(p) = pipelines.get(key) {
            return Ok((p.clone(), bgl));
        }
        let src = kernels::source(key).map_err(|e| Error::Device {
            what: format!("kernel {key:?}: {e}"),
        })?;
        let label = format!("{:?} {:?}", key.kernel, key.dtypes);
        #[cfg(not(target_arch = "wasm32"))]
        check_workgroup_storage(gpu, &label, &src)?;
        let pipeline = gpu.scoped(&format!("compiling kernel {label}"), || {
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            };
            let module = match checks {
                ShaderChecks::Checked => gpu.device.create_shader_module(desc),
                // SAFETY: bounds checks stay; what is dropped is safe for these kernels as
                // `ShaderChecks::Bounds` says (loops end, divisors are positive).
                ShaderChecks::Bounds => unsafe {
                    let mut bounds = wgpu::ShaderRuntimeChecks::checked();
                    bounds.force_loop_bounding = false;
                    bounds.int_div_checks = false;
                    gpu.device.create_shader_module_trusted(desc, bounds)
                },
                // SAFETY: the config asked for unchecked kernels; the op tests exercise their
                // indexing against the CPU reference (see `ShaderChecks::Unchecked`).
                ShaderChecks::Unchecked => unsafe {
                    gpu.device
                        .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
                },
            };
            gpu.device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&label),
                    layout: Some(&pl),
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        zero_initialize_workgroup_memory: checks == ShaderChecks::Checked,
                        ..wgpu::PipelineCompilationOptions::default()
                    },
                    cache: None,
                })
        })?;
        gpu.counters.add_kernel();
        pipelines.insert(key.clone(), pipeline.clone());
        Ok((pipeline, bgl))
    }
}

/// Refuses a kernel whose workgroup arrays exceed the device's
/// `max_compute_workgroup_storage_size`: wgpu leaves that limit to the driver, where going past
/// it is undefined. (Browsers check it themselves.) Counts every `var<workgroup>` of the source;
/// a variant declares only the arrays its entry point uses.
#[cfg(not(target_arch = "wasm32"))]
fn check_workgroup_storage(gpu: &Gpu, label: &str, src: &str) -> Result<()> {
    let bytes = workgroup_bytes(src).map_err(|e| Error::Device {
        what: format!("kernel {label}: {e}"),
    })?;
    let limit = gpu.caps.limits.max_compute_workgroup_storage_size;
    match bytes <= u64::from(limit) {
        true => Ok(()),
        false => Err(Error::Unsupported {
            backend: "webgpu".into(),
            op: "kernel",
            dtypes: String::new(),
            why: format!(
                "{label} needs {bytes} bytes of workgroup memory, over this device's \
                 max_compute_workgroup_storage_size of {limit}"
            ),
        }),
    }
}

/// Bytes of the `var<workgroup>` arrays of a WGSL source.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn workgroup_bytes(src: &str) -> std::result::Result<u64, String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| e.to_string())?;
    Ok(module
        .global_variables
        .iter()
        .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
        .map(|(_, g)| u64::from(layouter[g.ty].size))
        .sum())
}

/// Builds a bind group: the parameter slot at `params_offset` of `params`, then `windows` in
/// order. Every kernel's bind group is made here.
pub(crate) fn bind_group(
    gpu: &Gpu,
    layout: &wgpu::BindGroupLayout,
    params: &wgpu::Buffer,
    params_offset: u64,
    windows: &[Window],
) -> wgpu::BindGroup {
    let slot = wgpu::BufferBinding {
        buffer: params,
        offset: params_offset,
        size: NonZeroU64::new(PARAM_BYTES),
    };
    let entries: Vec<wgpu::BindGroupEntry> = std::iter::once(wgpu::BindingResource::Buffer(slot))
        .chain(windows.iter().map(|w| {
            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: w.buffer,
                offset: w.offset,
                size: NonZeroU64::new(w.size),
            })
        }))
        .enumerate()
        .map(|(i, resource)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource,
        })
        .collect();
    gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout,
        entries: &entries,
    })
}
