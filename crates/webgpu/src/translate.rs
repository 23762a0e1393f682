//! Every kernel variant the planner can emit ([`crate::ops::all_pipeline_keys`]: each family
//! over its dtypes, shape classes and feature sets), translated offline as wgpu's backends
//! translate it: parsed and validated by naga, then written as SPIR-V (Vulkan), MSL (Metal) and
//! HLSL (DX12). No GPU is needed; a failure names the variant and the backend.

use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};
use naga::Module;

use crate::kernels::{source, Kernel, PipelineKey};

/// The backends a variant can be planned on. The cooperative-matrix kernels take 16×16×16
/// tiles, which wgpu offers on Vulkan only (Metal's simdgroup matrices are 8×8, DX12 has none).
fn backends(key: &PipelineKey) -> &'static [Target] {
    match key.kernel {
        Kernel::MulMatCoop { .. } | Kernel::FlashAttnCoop { .. } => &[Target::Spv],
        _ => &[Target::Spv, Target::Msl, Target::Hlsl],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Spv,
    Msl,
    Hlsl,
}

/// Writes `module` for `target` with the language levels wgpu asks for on current drivers:
/// MSL 2.4 (macOS 12), HLSL shader model 6.4 (16-bit types, wave ops, `dot4add_i8packed`).
fn write(target: Target, module: &Module, info: &ModuleInfo) -> Result<usize, String> {
    match target {
        Target::Spv => spv::write_vec(module, info, &spv::Options::default(), None)
            .map(|words| words.len() * 4)
            .map_err(|e| e.to_string()),
        Target::Msl => {
            let options = msl::Options {
                lang_version: (2, 4),
                ..msl::Options::default()
            };
            msl::write_string(module, info, &options, &msl::PipelineOptions::default())
                .map(|(text, _)| text.len())
                .map_err(|e| e.to_string())
        }
        Target::Hlsl => {
            let options = hlsl::Options {
                shader_model: hlsl::ShaderModel::V6_4,
                ..hlsl::Options::default()
            };
            let mut text = String::new();
            hlsl::Writer::new(&mut text, &options, &hlsl::PipelineOptions::default())
                .write(module, info, None)
                .map(|_| text.len())
                .map_err(|e| e.to_string())
        }
    }
}

#[test]
fn every_variant_translates_for_vulkan_metal_and_dx12() {
    let keys = crate::ops::all_pipeline_keys();
    assert!(keys.len() > 50, "only {} variants", keys.len());
    let mut failures = Vec::new();
    let mut written = [0usize; 3];
    for key in &keys {
        let src = match source(key) {
            Ok(src) => src,
            Err(e) => {
                failures.push(format!("{key:?}: source: {e}"));
                continue;
            }
        };
        let module = match naga::front::wgsl::parse_str(&src) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{key:?}: WGSL:\n{}", e.emit_to_string(&src)));
                continue;
            }
        };
        let info =
            match Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&module) {
                Ok(info) => info,
                Err(e) => {
                    failures.push(format!("{key:?}: validation:\n{}", e.emit_to_string(&src)));
                    continue;
                }
            };
        for &target in backends(key) {
            match write(target, &module, &info) {
                Ok(_) => written[target as usize] += 1,
                Err(e) => failures.push(format!("{key:?}: {target:?}: {e}")),
            }
        }
    }
    println!(
        "{} kernel variants: {} written as SPIR-V, {} as MSL, {} as HLSL; {} failures",
        keys.len(),
        written[0],
        written[1],
        written[2],
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures, the first:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n\n")
    );
}
