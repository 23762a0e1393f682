//! `wgllm devices`: the WebGPU adapters this machine offers.

use std::io::Write;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;

/// Arguments of `wgllm devices`.
#[derive(ClapArgs, Debug)]
pub struct Args {}

/// Lists adapters with their features and key limits; fails when there are none.
pub fn run(_args: &Args, out: &mut impl Write) -> Result<()> {
    let adapters = wgllm_webgpu::list_adapters();
    if adapters.is_empty() {
        bail!(
            "no WebGPU adapter found: install a Vulkan, Metal or DX12 driver for your GPU; for a \
             software adapter on Linux: `apt-get install mesa-vulkan-drivers libvulkan1` (lavapipe)"
        );
    }
    for a in adapters {
        writeln!(
            out,
            "[{}] {} ({}, {})",
            a.index, a.name, a.backend, a.device_type
        )?;
        writeln!(out, "    driver: {} {}", a.driver, a.driver_info)?;
        writeln!(
            out,
            "    features: {}",
            if a.features.is_empty() {
                "-".to_string()
            } else {
                a.features.join(", ")
            }
        )?;
        writeln!(
            out,
            "    limits: max buffer {} MiB, max storage binding {} MiB, workgroup storage {} KiB, {} invocations, subgroup {}..{}",
            a.max_buffer_size >> 20,
            a.max_storage_buffer_binding_size >> 20,
            a.max_compute_workgroup_storage_size >> 10,
            a.max_compute_invocations_per_workgroup,
            a.subgroup_sizes.0,
            a.subgroup_sizes.1
        )?;
    }
    Ok(())
}
