//! `wgllm ops`: ggml's test-backend-ops for wgllm — every case of the op table (op × dtypes ×
//! shapes) run on the chosen backend and on the CPU reference, compared by NMSE.

use std::io::Write;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::testing::perf::{time_case, time_case_webgpu};
use wgllm_webgpu::testing::{cases, run_case, Outcome};

use super::backend::{BackendArgs, OpenedBackend};

/// Arguments of `wgllm ops`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only cases whose name contains this text (case-insensitive), e.g. `MUL_MAT` or `q4_K`.
    #[arg(long)]
    pub filter: Option<String>,
    /// Also time each passing case: time per run, GB/s of leaves and outputs, GFLOP/s of
    /// matrix products and attention (GPU timestamps when the device has TIMESTAMP_QUERY, else
    /// the host clock around back-to-back runs).
    #[arg(long)]
    pub perf: bool,
    /// Runs timed per case with --perf.
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 1000)]
    pub seed: u64,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// Prints one line per case and `N passed, M failed, K unsupported`; fails when any case failed.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let (opened, desc) = args.backend.open_typed()?;
    let backend = opened.as_dyn();
    writeln!(out, "backend: {desc}")?;
    if args.perf {
        let clock = match &opened {
            OpenedBackend::WebGpu(g) if g.capabilities().timestamp_query => "GPU timestamps",
            _ => "host clock (back-to-back runs, then a read)",
        };
        writeln!(out, "timing: {clock}")?;
    }
    let filter = args.filter.as_deref().map(str::to_lowercase);
    let (mut passed, mut failed, mut unsupported) = (0, 0, 0);
    for (i, case) in cases().iter().enumerate() {
        if filter
            .as_ref()
            .is_some_and(|f| !case.name.to_lowercase().contains(f))
        {
            continue;
        }
        let r = run_case(&CpuBackend, backend, case, args.seed + i as u64);
        let status = match &r.outcome {
            Outcome::Pass { nmse } => {
                passed += 1;
                format!("OK    nmse {nmse:.2e}")
            }
            Outcome::Fail { nmse, max_nmse } => {
                failed += 1;
                format!("FAIL  nmse {nmse:.2e} > {max_nmse:.0e}")
            }
            Outcome::Unsupported(why) => {
                unsupported += 1;
                format!("unsupported: {why}")
            }
            Outcome::Error(e) => {
                failed += 1;
                format!("ERROR {e}")
            }
        };
        let perf = match (&r.outcome, args.perf) {
            (Outcome::Pass { .. }, true) => {
                let seed = args.seed + i as u64;
                let timed = match &opened {
                    OpenedBackend::WebGpu(g) => time_case_webgpu(g, case, seed, args.reps),
                    OpenedBackend::Cpu(_) => time_case(backend, case, seed, args.reps),
                };
                match timed {
                    Ok(p) if p.flops > 0 => format!(
                        " | {:.1} us, {:.3} GB/s, {:.3} GFLOP/s",
                        p.seconds * 1e6,
                        p.gbps(),
                        p.gflops()
                    ),
                    Ok(p) => format!(" | {:.1} us, {:.3} GB/s", p.seconds * 1e6, p.gbps()),
                    Err(e) => format!(" | timing failed: {e}"),
                }
            }
            _ => String::new(),
        };
        writeln!(
            out,
            "{:<72} {status} ({:.1} ms){perf}",
            r.name,
            r.time.as_secs_f64() * 1e3
        )?;
    }
    writeln!(
        out,
        "{passed} passed, {failed} failed, {unsupported} unsupported"
    )?;
    if failed > 0 {
        bail!("{failed} op cases failed");
    }
    Ok(())
}
