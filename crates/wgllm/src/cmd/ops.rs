//! `wgllm ops`: ggml's test-backend-ops for wgllm — every case of the op table (op × dtypes ×
//! shapes) run on the chosen backend and on the CPU reference, compared by NMSE.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::testing::perf::{time_case, time_case_webgpu, Perf, CLOCK_RAMP};
use wgllm_webgpu::testing::{cases, int8_bound, large_cases, run_case, Case, Outcome, COPY_CASE};

use super::backend::{BackendArgs, Int8Choice, OpenedBackend};

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
    /// Instead of the op table, time issue 6's benchmark shapes (mat-vec per weight type at
    /// Llama-8B sizes, alone and streamed through 8 layers of distinct weights that no cache
    /// holds, f16 mat-mat at 4096³ and prefill sizes, decode attention over 4k/32k
    /// keys), each reported as GB/s and as a fraction of a 256 MiB copy's GB/s in the same run.
    /// The mat-vec and attention shapes are first checked against the CPU reference. With GPU
    /// timestamps a case of two kernel families or more (a product and the rounding of its
    /// activations, a split attention and its combine) is followed by a row per family (↳):
    /// its dispatches' own time a run, each timed between timestamps before and after it, and
    /// the GB/s of their operands. Timed alone, a dispatch also pays a fixed cost of a few µs
    /// that a run of back-to-back dispatches hides in part. With GPU timestamps
    /// each case first runs for at least 1.5 s: a GPU left idle while the host prepared the
    /// case has lowered its clock.
    #[arg(long)]
    pub large: bool,
    /// Instead of a line per case, a Markdown support matrix (`docs/ops.md`): one row per op
    /// and operand type, whether its cases passed on this backend. No timings, so the same
    /// adapter writes the same file.
    #[arg(long, conflicts_with_all = ["perf", "large"])]
    pub support: bool,
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
    if !args.support {
        writeln!(out, "backend: {desc}")?;
    }
    if args.perf {
        let clock = match &opened {
            OpenedBackend::WebGpu(g) if g.capabilities().timestamp_query => "GPU timestamps",
            _ => "host clock (back-to-back runs, then a read)",
        };
        writeln!(out, "timing: {clock}")?;
    }
    if args.large {
        return run_large(args, &opened, out);
    }
    if args.support {
        return super::ops_support::run(&opened, &desc, args.filter.as_deref(), args.seed, out);
    }
    let filter = args.filter.as_deref().map(str::to_lowercase);
    let (mut passed, mut failed, mut unsupported) = (0, 0, 0);
    for case in cases().iter() {
        if filter
            .as_ref()
            .is_some_and(|f| !case.name.to_lowercase().contains(f))
        {
            continue;
        }
        let r = run_case(&CpuBackend, backend, case, args.seed);
        let status = match &r.outcome {
            Outcome::Pass { nmse } => {
                passed += 1;
                format!("OK    nmse {nmse:.2e}")
            }
            Outcome::Fail { nmse, .. } if int8_rounding(args, case, *nmse, false) => {
                passed += 1;
                format!("OK    nmse {nmse:.2e} (int8 activations)")
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
                match time(&opened, case, args.seed, args.reps, false) {
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

/// Whether a failed case's `nmse` is what int8 activations explain: a product or fusion case
/// that took them, within [`int8_bound`] (as the op tests bound them). The op table's shapes
/// hold far less than `large`'s 4 MiB of weights, so only `all` rounds them; `--large`'s
/// shapes are over it (`large_shapes`).
fn int8_rounding(args: &Args, case: &Case, nmse: f64, large_shapes: bool) -> bool {
    let rounded = match args.backend.int8_activations {
        Int8Choice::Off => false,
        Int8Choice::Large => large_shapes,
        Int8Choice::All => true,
    };
    rounded && int8_bound(case).is_some_and(|b| nmse <= b)
}

/// `case` timed on `opened`. `large`: each kernel family's time too, and a warm-up of
/// [`CLOCK_RAMP`], since its cases follow seconds of host work (their weights, the CPU check);
/// the op table's small cases follow each other quickly.
fn time(
    opened: &OpenedBackend,
    case: &Case,
    seed: u64,
    reps: usize,
    large: bool,
) -> wgllm_core::Result<Perf> {
    let warm_wall = if large { CLOCK_RAMP } else { Duration::ZERO };
    match opened {
        OpenedBackend::WebGpu(g) => time_case_webgpu(g, case, seed, reps, large, warm_wall),
        OpenedBackend::Cpu(_) => time_case(opened.as_dyn(), case, seed, reps),
    }
}

/// `--large`: the benchmark shapes, the copy first so every later line has its fraction, each
/// case of several kernel families followed by their own times (`Perf::families`).
fn run_large(args: &Args, opened: &OpenedBackend, out: &mut impl Write) -> Result<()> {
    let filter = args.filter.as_deref().map(str::to_lowercase);
    let mut copy_gbps = None;
    let mut failed = 0;
    writeln!(
        out,
        "| case | check | us | GB/s | of copy | GFLOP/s |\n|---|---|---:|---:|---:|---:|"
    )?;
    for large in large_cases().iter() {
        let case = &large.case;
        let is_copy = case.name == COPY_CASE;
        if !is_copy
            && filter
                .as_ref()
                .is_some_and(|f| !case.name.to_lowercase().contains(f))
        {
            continue;
        }
        let seed = args.seed;
        let check = match large.check {
            false => "-".to_string(),
            true => match run_case(&CpuBackend, opened.as_dyn(), case, seed).outcome {
                Outcome::Pass { nmse } => format!("nmse {nmse:.1e}"),
                // Int8 activations round the products' inputs (as the op tests bound them).
                Outcome::Fail { nmse, .. } if int8_rounding(args, case, nmse, true) => {
                    format!("nmse {nmse:.1e} (int8)")
                }
                other => {
                    failed += 1;
                    writeln!(out, "| {} | {other:?} | | | | |", case.name)?;
                    continue;
                }
            },
        };
        let p = match time(opened, case, seed, args.reps, true) {
            Ok(p) => p,
            Err(e) => {
                writeln!(
                    out,
                    "| {} | {check} | timing failed: {e} | | | |",
                    case.name
                )?;
                continue;
            }
        };
        if is_copy {
            copy_gbps = Some(p.gbps());
        }
        let of_copy = copy_gbps.map_or("-".into(), |c| format!("{:.2}", p.gbps() / c));
        let gflops = match p.flops {
            0 => "-".to_string(),
            _ => format!("{:.0}", p.gflops()),
        };
        writeln!(
            out,
            "| {} | {check} | {:.1} | {:.0} | {of_copy} | {gflops} |",
            case.name,
            p.seconds * 1e6,
            p.gbps()
        )?;
        // One family alone would repeat the case's row.
        let families = match p.families.len() {
            0 | 1 => &[][..],
            _ => &p.families[..],
        };
        for f in families {
            let of_copy = copy_gbps.map_or("-".into(), |c| format!("{:.2}", f.gbps() / c));
            let gflops = f.gflops().map_or("-".into(), |g| format!("{g:.0}"));
            writeln!(
                out,
                "| ↳ {} ×{:.0} | - | {:.1} | {:.0} | {of_copy} | {gflops} |",
                f.family,
                f.dispatches,
                f.ns / 1e3,
                f.gbps()
            )?;
        }
    }
    writeln!(
        out,
        "clock: {}",
        match opened {
            OpenedBackend::WebGpu(g) if g.capabilities().timestamp_query => "GPU timestamps",
            _ => "host clock",
        }
    )?;
    if failed > 0 {
        bail!("{failed} benchmark shapes disagree with the CPU reference");
    }
    Ok(())
}
