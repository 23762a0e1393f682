//! Loading a model onto the device: a progress bar on stderr (a terminal only) following the
//! bytes of weights the device has received out of the file's, then what the load put there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use wgllm_webgpu::Counters;

/// What a load put on the device.
#[derive(Clone, Copy, Debug, Default)]
pub struct Loaded {
    pub weight_bytes: u64,
    pub allocated_bytes: u64,
    pub kernels: u64,
}

impl std::fmt::Display for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{:.1} MiB of weights, {:.1} MiB allocated on the device, {} kernels compiled",
            mib(self.weight_bytes),
            mib(self.allocated_bytes),
            self.kernels
        )
    }
}

fn snapshot(c: &Counters) -> Loaded {
    Loaded {
        weight_bytes: c.weight_bytes(),
        allocated_bytes: c.allocated_bytes(),
        kernels: c.kernels(),
    }
}

/// Runs `load` (which compiles a model's graphs, and so uploads its weights) while a progress
/// bar follows `counters` towards `total` weight bytes; returns its result and, on a GPU, what it
/// put on the device (the counts' growth during `load`).
pub fn with_progress<T>(
    counters: Option<Arc<Counters>>,
    total: u64,
    load: impl FnOnce() -> Result<T>,
) -> Result<(T, Option<Loaded>)> {
    let Some(c) = counters else {
        return Ok((load()?, None));
    };
    let before = snapshot(&c);
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let bar = ProgressBar::new(total).with_style(
                ProgressStyle::with_template(
                    "wgllm: loading [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec}",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            while !done.load(Ordering::Relaxed) {
                bar.set_position((c.weight_bytes() - before.weight_bytes).min(total));
                std::thread::sleep(Duration::from_millis(50));
            }
            bar.finish_and_clear();
        });
        let r = load();
        done.store(true, Ordering::Relaxed);
        r
    })?;
    let after = snapshot(&c);
    Ok((
        result,
        Some(Loaded {
            weight_bytes: after.weight_bytes - before.weight_bytes,
            allocated_bytes: after.allocated_bytes - before.allocated_bytes,
            kernels: after.kernels - before.kernels,
        }),
    ))
}

/// The line a command prints once its model is loaded: `what` (file, adapter, shape), the
/// time since `t0`, and what the device was given.
pub fn report(what: &str, t0: Instant, loaded: Option<Loaded>) {
    let secs = t0.elapsed().as_secs_f64();
    match loaded {
        Some(l) => eprintln!("wgllm: {what}, loaded in {secs:.2} s: {l}"),
        None => eprintln!("wgllm: {what}, loaded in {secs:.2} s"),
    }
}
