//! What one small compute dispatch costs through wgpu on this machine's first adapter, by how
//! the dispatches are recorded: `cargo run --release -p wgllm-webgpu --example dispatch_floor`.
//!
//! Every variant runs 400 dispatches of a one-workgroup kernel per run, times runs on the host
//! (encode + submit + wait) and on the GPU (timestamps at the start of the first pass and the
//! end of the last), and prints µs per dispatch. A decode step of a small model is ~300 such
//! dispatches, so this floor bounds its tokens per second.

use std::num::NonZeroU64;
use std::time::Instant;

const N: usize = 400;
const REPS: usize = 30;

const SHADER: &str = r#"
struct P { a: f32, b: f32, pad0: f32, pad1: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if g.x == 0u { x[0] = x[0] * p.a + p.b; }
}
"#;

const SHADER_RO: &str = r#"
struct P { a: f32, b: f32, pad0: f32, pad1: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if g.x == 0u { y[0] = x[0] * p.a + p.b; }
}
"#;

struct Variant {
    name: &'static str,
    /// Bind group of each dispatch.
    groups: Vec<wgpu::BindGroup>,
    pipeline: wgpu::ComputePipeline,
    workgroups: u32,
    per_pass: usize,
    per_submit: usize,
}

fn main() {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .expect("an adapter");
    let info = adapter.get_info();
    println!("adapter: {} ({:?})", info.name, info.backend);
    let features = adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: None,
        required_features: features,
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .expect("a device");
    let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);

    let pipeline = |src: &str| {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        })
    };
    let rw = pipeline(SHADER);
    let ro = pipeline(SHADER_RO);
    let align = u64::from(adapter.limits().min_uniform_buffer_offset_alignment).max(u64::from(
        adapter.limits().min_storage_buffer_offset_alignment,
    ));
    let params = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: align * N as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut words = vec![0f32; (align * N as u64 / 4) as usize];
    for i in 0..N {
        words[i * (align / 4) as usize] = 0.5;
        words[i * (align / 4) as usize + 1] = 1.0;
    }
    queue.write_buffer(&params, 0, bytemuck::cast_slice(&words));
    let storage = |size: u64| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let arena = storage(align * (N as u64 + 1));
    let own: Vec<wgpu::Buffer> = (0..N).map(|_| storage(256)).collect();
    let uniform = |i: usize| {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &params,
            offset: i as u64 * align,
            size: NonZeroU64::new(16),
        })
    };
    fn window(b: &wgpu::Buffer, offset: u64) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: b,
            offset,
            size: NonZeroU64::new(16),
        })
    }
    let group = |p: &wgpu::ComputePipeline, resources: Vec<wgpu::BindingResource>| {
        let entries: Vec<wgpu::BindGroupEntry> = resources
            .into_iter()
            .enumerate()
            .map(|(i, resource)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource,
            })
            .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &p.get_bind_group_layout(0),
            entries: &entries,
        })
    };
    // Dependent: every dispatch updates the same element, as a decode step's chain does.
    let same: Vec<wgpu::BindGroup> = (0..N)
        .map(|i| group(&rw, vec![uniform(i), window(&arena, 0)]))
        .collect();
    // Windows of one buffer: independent work, but one buffer as far as wgpu tracks it.
    let windows: Vec<wgpu::BindGroup> = (0..N)
        .map(|i| group(&rw, vec![uniform(i), window(&arena, i as u64 * align)]))
        .collect();
    // A buffer each: nothing for wgpu to order.
    let apart: Vec<wgpu::BindGroup> = (0..N)
        .map(|i| group(&rw, vec![uniform(i), window(&own[i], 0)]))
        .collect();
    // A chain through separate buffers: reads the last one's output, writes its own.
    let chain: Vec<wgpu::BindGroup> = (0..N)
        .map(|i| {
            group(
                &ro,
                vec![
                    uniform(i),
                    window(&own[(i + N - 1) % N], 0),
                    window(&own[i], 0),
                ],
            )
        })
        .collect();
    let variants = vec![
        Variant {
            name: "dependent, one buffer, one pass",
            groups: same.clone(),
            pipeline: rw.clone(),
            workgroups: 1,
            per_pass: N,
            per_submit: N,
        },
        Variant {
            name: "dependent, one buffer, submit every 96",
            groups: same.clone(),
            pipeline: rw.clone(),
            workgroups: 1,
            per_pass: N,
            per_submit: 96,
        },
        Variant {
            name: "dependent, one buffer, pass per dispatch",
            groups: same.clone(),
            pipeline: rw.clone(),
            workgroups: 1,
            per_pass: 1,
            per_submit: N,
        },
        Variant {
            name: "dependent, one buffer, 132 workgroups",
            groups: same,
            pipeline: rw.clone(),
            workgroups: 132,
            per_pass: N,
            per_submit: N,
        },
        Variant {
            name: "independent windows of one buffer",
            groups: windows,
            pipeline: rw.clone(),
            workgroups: 1,
            per_pass: N,
            per_submit: N,
        },
        Variant {
            name: "independent, a buffer each",
            groups: apart,
            pipeline: rw,
            workgroups: 1,
            per_pass: N,
            per_submit: N,
        },
        Variant {
            name: "chain through separate buffers (read-only input)",
            groups: chain,
            pipeline: ro,
            workgroups: 1,
            per_pass: N,
            per_submit: N,
        },
    ];

    let query = timestamps.then(|| {
        device.create_query_set(&wgpu::QuerySetDescriptor {
            label: None,
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        })
    });
    let resolve = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 256,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 256,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let period = f64::from(queue.get_timestamp_period());
    let wait = || {
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
    };

    println!("| variant | host µs/dispatch | encode µs/dispatch | GPU µs/dispatch |");
    for v in &variants {
        let mut host = 0.0;
        let mut encode = 0.0;
        let mut gpu = 0.0;
        for rep in 0..=REPS {
            let t0 = Instant::now();
            let mut at = 0;
            let submits = N.div_ceil(v.per_submit);
            for (s, batch) in v.groups.chunks(v.per_submit).enumerate() {
                let mut enc = device.create_command_encoder(&Default::default());
                let passes = batch.len().div_ceil(v.per_pass);
                for (p, pass_groups) in batch.chunks(v.per_pass).enumerate() {
                    let first = s == 0 && p == 0;
                    let last = s + 1 == submits && p + 1 == passes;
                    let writes = query.as_ref().and_then(|q| {
                        (first || last).then_some(wgpu::ComputePassTimestampWrites {
                            query_set: q,
                            beginning_of_pass_write_index: first.then_some(0),
                            end_of_pass_write_index: last.then_some(1),
                        })
                    });
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: writes,
                    });
                    pass.set_pipeline(&v.pipeline);
                    for g in pass_groups {
                        pass.set_bind_group(0, g, &[]);
                        pass.dispatch_workgroups(v.workgroups, 1, 1);
                    }
                    at += pass_groups.len();
                }
                if s + 1 == submits {
                    if let Some(q) = &query {
                        enc.resolve_query_set(q, 0..2, &resolve, 0);
                        enc.copy_buffer_to_buffer(&resolve, 0, &readback, 0, 16);
                    }
                }
                queue.submit([enc.finish()]);
            }
            let t_enc = t0.elapsed().as_secs_f64();
            wait();
            let t_all = t0.elapsed().as_secs_f64();
            assert_eq!(at, N);
            let mut ns = 0.0;
            if query.is_some() {
                readback.map_async(wgpu::MapMode::Read, .., |r| r.expect("map"));
                wait();
                let ticks: Vec<u64> =
                    bytemuck::pod_collect_to_vec(&readback.get_mapped_range(..16).expect("range"));
                readback.unmap();
                ns = ticks[1].saturating_sub(ticks[0]) as f64 * period;
            }
            if rep > 0 {
                host += t_all;
                encode += t_enc;
                gpu += ns;
            }
        }
        let per = |total: f64, unit: f64| total / REPS as f64 / N as f64 * unit;
        println!(
            "| {} | {:.2} | {:.2} | {:.2} |",
            v.name,
            per(host, 1e6),
            per(encode, 1e6),
            per(gpu, 1e-3)
        );
    }
}
