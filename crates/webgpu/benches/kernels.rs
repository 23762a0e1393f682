//! Criterion benchmarks of issue 6's kernel shapes on the default WebGPU adapter: the cases of
//! `wgllm ops --large` (a 256 MiB copy; quantized mat-vec at Llama 3.1 8B's shapes, alone and
//! streamed through 8 layers of distinct weights; f16 and quantized mat-mat at prefill shapes;
//! chains of small dependent dispatches; decode attention over 512 to 32,768 keys; top-k and
//! argmax over vocabularies). Each run is timed on the GPU (its span between timestamps; the
//! host clock around the run and its wait where the adapter has no timestamp queries), with the
//! bytes of its leaves and outputs as the throughput: criterion reports GB/s beside the time,
//! to set against the copy's in the same run.
//!
//! `cargo bench -p wgllm-webgpu --bench kernels -- 'MUL_MAT q4_K'` times the cases whose name
//! contains the text (plain text: criterion reads it as a regular expression too). The whole
//! set takes minutes on a GPU and far longer on a software rasterizer such as lavapipe; the
//! cases are only built (their weights and states up to 2 GB) once selected.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use wgllm_webgpu::testing::large_cases;
use wgllm_webgpu::testing::perf::{Timed, CLOCK_RAMP};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

/// The inputs' seed (`wgllm ops`'s default).
const SEED: u64 = 1000;

/// The name filter criterion was given: the first argument that is not an option.
fn filter() -> Option<String> {
    std::env::args().skip(1).find(|a| !a.starts_with('-'))
}

fn kernels(c: &mut Criterion) {
    let backend = match WebGpuBackend::new(WebGpuConfig::default()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("kernels: no WebGPU adapter ({e}): nothing to time");
            return;
        }
    };
    let filter = filter();
    let mut group = c.benchmark_group("kernels");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for large in large_cases() {
        let name = large.case.name.clone();
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let mut timed = match Timed::new(&backend, &large.case, SEED) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("kernels: {name}: {e}");
                continue;
            }
        };
        if let Err(e) = timed.warm_up(CLOCK_RAMP) {
            eprintln!("kernels: {name}: {e}");
            continue;
        }
        group.throughput(Throughput::BytesDecimal(timed.bytes));
        group.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                let seconds = timed
                    .seconds(iters as usize)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                Duration::from_secs_f64(seconds)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
