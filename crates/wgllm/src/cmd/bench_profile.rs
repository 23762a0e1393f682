//! `--profile` for the encoder benchmarks (embeddings, speech): one run of a closure with a
//! timestamp around every dispatch, grouped by kernel family, and the table they print.

use std::io::Write;

use anyhow::{bail, Result};
use serde_json::{json, Value};
use wgllm_webgpu::profile::{families, FamilyTime, Profiling, RunProfile};
use wgllm_webgpu::WebGpuBackend;

/// The kernel families of one call of `run` on `gpu`, most expensive first. Every graph the call
/// runs counts as one run.
pub fn profile_once<T>(
    gpu: &WebGpuBackend,
    run: impl FnOnce() -> Result<T>,
) -> Result<Vec<FamilyTime>> {
    gpu.take_profiles();
    gpu.set_profiling(Profiling::Dispatches);
    let r = run();
    gpu.set_profiling(Profiling::Off);
    r?;
    let Some(run) = RunProfile::merged(&gpu.take_profiles()) else {
        bail!("the profiled run ran no profiled graph");
    };
    Ok(families(&[run]))
}

/// The families as JSON objects.
pub fn to_json(fams: &[FamilyTime]) -> Vec<Value> {
    fams.iter()
        .map(|f| json!({"family": f.family, "dispatches": f.dispatches, "ns": f.ns, "bytes": f.bytes, "flops": f.flops}))
        .collect()
}

/// A title line with the summed GPU time, then the families' table.
pub fn write_table(out: &mut impl Write, title: &str, fams: &[FamilyTime]) -> Result<()> {
    let total: f64 = fams.iter().map(|f| f.ns).sum();
    writeln!(out)?;
    writeln!(out, "{title}: GPU busy {:.1} us", total / 1e3)?;
    writeln!(out)?;
    writeln!(
        out,
        "| kernel family | dispatches | time (us) | share | GB/s | GFLOP/s |"
    )?;
    writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: |")?;
    for f in fams {
        writeln!(
            out,
            "| {} | {:.0} | {:.1} | {:.1}% | {:.1} | {} |",
            f.family,
            f.dispatches,
            f.ns / 1e3,
            100.0 * f.ns / total.max(f64::MIN_POSITIVE),
            f.gbps(),
            f.gflops().map_or("-".into(), |g| format!("{g:.0}"))
        )?;
    }
    Ok(())
}
