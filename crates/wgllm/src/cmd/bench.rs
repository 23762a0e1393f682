//! `wgllm bench`: llama-bench's table for wgllm — prompt processing (`pp`) and token generation
//! (`tg`) throughput in tokens/s, mean ± sample stddev over repetitions after a warm-up of at
//! least 1.5 s ([`WARM_UP`]).
//!
//! - `pp P`: from an empty cache, one `Session::eval` of P random valid tokens (processed in
//!   chunks of at most `--ubatch`).
//! - `tg N`: from an empty cache, N one-token steps of greedy decoding as `wgllm run` decodes:
//!   the first token random, each next one the last step's argmax, fed on the device, with one
//!   step queued ahead of the one being read (`wgllm_models::ahead::Ahead`, generation's own
//!   loop; the first step past a decode window's end takes its token from the host). llama-bench's
//!   `tg` waits for every step instead; `--profile` reports such a waited-for step. tg does not
//!   depend on `--ubatch`, so it runs once, with the first ubatch of the sweep. With `--sample`, tg
//!   samples as `wgllm run` does by default (llama.cpp's chain: temperature 0.8, top-k 40,
//!   top-p 0.95, min-p 0.05, seeded with `--seed`): each token drawn on the device from the
//!   step's top-K candidates and fed to the next step there, one step queued ahead.
//!
//! Each tg row also gets a roofline: the weight + KV bytes one token must read at least (weights
//! read per token, without the token embedding unless it doubles as the output matrix, plus the
//! K and V rows of every cached position, assuming every layer attends to the whole context),
//! the bandwidth that implies at the measured rate, and that bandwidth as a fraction of an f32
//! copy kernel's (read + write) measured through the same backend in the same run.
//!
//! `--profile` times one decode step kernel by kernel (GPU timestamps when the device has them,
//! see `wgllm_webgpu::profile`), grouped by kernel family; with `--profile-tokens P` the
//! profiled step is a prompt chunk of P tokens instead (a prefill step, up to `--ubatch` a graph).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use serde_json::{json, Value};
use wgllm_core::{Backend, DType, Graph};
use wgllm_gguf::GgufFile;
use wgllm_models::ahead::Ahead;
use wgllm_models::sampler::{Sampler, SamplerConfig};
use wgllm_models::{Architecture, Session, SessionConfig};
use wgllm_webgpu::profile::{families, Clock, FamilyTime, Profiling, RunProfile};

use super::backend::{BackendArgs, OpenedBackend};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A Markdown table, like llama-bench's default.
    Md,
    /// One JSON object: model, backend, copy bandwidth, results, profile.
    Json,
    /// One CSV line per test.
    Csv,
}

/// Arguments of `wgllm bench`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// GGUF file, a known model name (`smollm2`, `gemma3-270m`), `hf:OWNER/REPO/FILE.gguf` or
    /// `hf:OWNER/REPO:QUANT` (by quant tag);
    /// default: smollm2.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub hub: super::pull::HubArgs,
    /// Prompt lengths to time (pp), comma-separated; 0 skips prompt processing.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Token counts to generate (tg), comma-separated; 0 skips generation.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Tokens already in the cache when each test starts (prefilled untimed), comma-separated,
    /// as llama-bench's -d: `tg128 @ d4096` decodes positions 4096..4223.
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub depth: Vec<usize>,
    /// Timed repetitions of each test (after one warm-up).
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Largest prompt chunk per step, comma-separated to sweep.
    #[arg(long, value_delimiter = ',', default_value = "512")]
    pub ubatch: Vec<usize>,
    /// KV cache capacity (default: the largest test's length, or what --profile needs).
    #[arg(short = 'c', long)]
    pub ctx: Option<usize>,
    /// KV cache type: f16, q8_0, q4_0 or f32.
    #[arg(long, default_value = "f16")]
    pub kv_type: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "md")]
    pub output: Format,
    /// Also write the JSON report to this file (whatever -o prints).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also time one decode step kernel by kernel, grouped by kernel family (an embedding model:
    /// one batch of each shape; a Whisper model: one encoder run).
    #[arg(long)]
    pub profile: bool,
    /// Decode steps --profile averages.
    #[arg(long, default_value_t = 5)]
    pub profile_steps: usize,
    /// Tokens of each step --profile times: 1 is a decode step, more a prompt chunk (prefill).
    #[arg(long, default_value_t = 1)]
    pub profile_tokens: usize,
    /// Seed of the random tokens (and of the sampler with --sample).
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// Embedding models: inputs per batch, comma-separated (each of every -p length).
    #[arg(long, value_delimiter = ',', default_value = "1,32,256")]
    pub batch: Vec<usize>,
    /// tg samples with `wgllm run`'s default sampler (temperature 0.8, top-k 40, top-p 0.95,
    /// min-p 0.05), each token drawn on the device, instead of greedy decoding.
    #[arg(long)]
    pub sample: bool,
    /// Whisper models: the audio file to transcribe (default: 30 s of a test tone).
    #[arg(long, value_name = "FILE")]
    pub audio: Option<PathBuf>,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// One-token warm-up steps before timed or profiled decoding.
const WARM_STEPS: usize = 3;

/// How long a test's warm-up runs repeat before its timed runs (at least one run): a GPU that
/// sat idle, while the process started and loaded the model, runs at its lowest clocks until
/// its power management raises them: one warm-up run is not enough.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(1500);

/// What the table says about the model.
struct ModelInfo {
    name: String,
    /// Bytes of all tensors.
    size: u64,
    params: u64,
    /// Weight bytes one decode step reads.
    weight_bytes_per_token: u64,
    /// K + V bytes of one cached position over all layers.
    kv_bytes_per_position: u64,
}

impl ModelInfo {
    fn new(name: String, file: &GgufFile, arch: &Architecture, kv: DType) -> Result<ModelInfo> {
        let hp = arch.hparams();
        let (mut size, mut params, mut read) = (0, 0, 0);
        for t in file.tensors() {
            size += t.size();
            params += t.nelements();
            // The embedding table is read one row per token unless it is also the output matrix;
            // of a mixture of experts' tensors, the experts a token uses.
            match arch.moe() {
                Some(m) if t.name().ends_with("_exps.weight") => {
                    read += t.size() / m.n_expert * m.n_expert_used;
                }
                _ if t.name() != "token_embd.weight" || hp.tied_output => read += t.size(),
                _ => {}
            }
        }
        let row = kv
            .row_bytes(hp.n_head_kv * hp.head_dim)
            .context("KV row size")?;
        Ok(ModelInfo {
            name,
            size,
            params,
            weight_bytes_per_token: read,
            kv_bytes_per_position: 2 * u64::from(hp.n_layer) * row,
        })
    }

    /// Weight + KV bytes per token of a tg run of `n` tokens after `depth` cached ones (step
    /// `i` attends to `depth + i + 1` positions).
    fn tg_bytes_per_token(&self, depth: usize, n: usize) -> f64 {
        self.weight_bytes_per_token as f64
            + self.kv_bytes_per_position as f64 * (depth as f64 + (n as f64 + 1.0) / 2.0)
    }
}

/// A copy kernel's bandwidth through the backend.
struct CopyBandwidth {
    bytes: u64,
    /// (read + write bytes) / s / 1e9.
    gbps: f64,
    clock: String,
}

/// A timed test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Test {
    Pp(usize),
    Tg(usize),
}

impl Test {
    fn name(self) -> String {
        match self {
            Test::Pp(p) => format!("pp{p}"),
            Test::Tg(n) => format!("tg{n}"),
        }
    }

    fn tokens(self) -> usize {
        match self {
            Test::Pp(n) | Test::Tg(n) => n,
        }
    }
}

struct Row {
    test: Test,
    /// Tokens in the cache when the test starts.
    depth: usize,
    ubatch: usize,
    /// Tokens per second of each repetition.
    samples: Vec<f64>,
}

impl Row {
    /// `tg128`, or `tg128 @ d4096` after 4,096 cached tokens (llama-bench's names).
    fn name(&self) -> String {
        match self.depth {
            0 => self.test.name(),
            d => format!("{} @ d{d}", self.test.name()),
        }
    }

    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }

    /// Sample standard deviation (0 for one sample), as llama-bench.
    fn stddev(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.samples.iter().map(|s| (s - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// The roofline of a tg row: bytes per token, implied GB/s, fraction of the copy bandwidth.
fn roofline(
    row: &Row,
    model: &ModelInfo,
    copy: Option<&CopyBandwidth>,
) -> Option<(f64, f64, Option<f64>)> {
    let Test::Tg(n) = row.test else {
        return None;
    };
    let bytes = model.tg_bytes_per_token(row.depth, n);
    let gbps = bytes * row.mean() / 1e9;
    Some((bytes, gbps, copy.map(|c| gbps / c.gbps)))
}

/// The `--profile` result: mean per step.
struct Profile {
    clock: Clock,
    steps: usize,
    /// Tokens a step evaluates (1: a decode step).
    tokens: usize,
    position: usize,
    families: Vec<FamilyTime>,
    dispatches: f64,
    /// Sum of dispatch times, span first start → last end, host encode + submit (ns), with a
    /// timestamp around every dispatch.
    dispatch_ns: f64,
    span_ns: f64,
    encode_ns: f64,
    /// Host time of a whole step, its GPU span and its host encode + submit (ns), timed with
    /// one timestamp at each end only, so the step runs as it does unprofiled.
    step_wall_ns: f64,
    step_span_ns: f64,
    step_encode_ns: f64,
}

/// Random valid token ids (splitmix64).
struct Tokens(u64);

impl Tokens {
    fn take(&mut self, n: usize, n_vocab: usize) -> Vec<u32> {
        (0..n)
            .map(|_| {
                self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.0;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                ((z ^ (z >> 31)) % n_vocab as u64) as u32
            })
            .collect()
    }
}

/// Seconds of one run of `test` after `depth` random tokens prefilled untimed; tg samples with
/// `sampling` (greedy without).
fn time_test(
    s: &mut Session,
    (test, depth): (Test, usize),
    tokens: &mut Tokens,
    sampling: Option<SamplerConfig>,
) -> Result<f64> {
    let n_vocab = s.architecture().n_vocab();
    s.reset();
    if depth > 0 {
        s.eval(&tokens.take(depth, n_vocab))?;
    }
    let ids = tokens.take(test.tokens(), n_vocab);
    let t0 = Instant::now();
    match test {
        Test::Pp(_) => {
            s.eval(&ids)?;
        }
        Test::Tg(n) => {
            let mut sampler = sampling.map(Sampler::new);
            let mut ahead = Ahead::new(0, sampler.is_some());
            let mut next = ids[0];
            for i in 0..n {
                let row = ahead.step(s, sampler.as_mut(), next, i + 1 < n)?;
                next = row.sampled.unwrap_or(row.argmax);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cached = s.n_past();
    if cached != depth + test.tokens() {
        bail!(
            "the cache holds {cached} tokens after {} at depth {depth}",
            test.name()
        );
    }
    Ok(secs)
}

/// Warms up (for [`WARM_UP`]), then times `reps` runs of `test` after `depth` cached tokens.
fn run_test(
    s: &mut Session,
    (test, depth): (Test, usize),
    reps: usize,
    tokens: &mut Tokens,
    sampling: Option<SamplerConfig>,
) -> Result<Vec<f64>> {
    let warm = match test {
        Test::Pp(p) => Test::Pp(p),
        Test::Tg(n) => Test::Tg(n.min(WARM_STEPS)),
    };
    let t0 = Instant::now();
    loop {
        time_test(s, (warm, depth), tokens, sampling)?;
        if t0.elapsed() >= WARM_UP {
            break;
        }
    }
    (0..reps)
        .map(|_| Ok(test.tokens() as f64 / time_test(s, (test, depth), tokens, sampling)?))
        .collect()
}

/// Bandwidth of an f32 copy graph, as large as the device allows up to 256 MiB (32 MiB on a
/// software adapter, 64 MiB on the CPU backend), best of five timed runs. 256 MiB is far past
/// any GPU's cache and the size `wgllm ops --large` copies (larger copies measure less on
/// some GPUs, through the same kernel).
fn copy_bandwidth(backend: &OpenedBackend) -> Result<CopyBandwidth> {
    let bytes: u64 = match backend {
        OpenedBackend::WebGpu(g) => {
            let caps = g.capabilities();
            let cap = if g.adapter().device_type == "Cpu" {
                32 << 20
            } else {
                256 << 20
            };
            cap.min(caps.binding_limit / 2)
                .min(caps.limits.max_buffer_size / 2)
                / 4
                * 4
        }
        OpenedBackend::Cpu(_) => 64 << 20,
    };
    let mut graph = Graph::new();
    let src = graph.state("copy.src", DType::F32, [bytes / 4, 1, 1, 1])?;
    let dst = graph.cont(src, DType::F32)?;
    graph.mark_output(dst)?;
    let mut best = f64::INFINITY;
    let clock = match backend {
        OpenedBackend::WebGpu(g) => {
            let mut exe = g.compile_webgpu(&graph)?;
            let mut clock = Clock::Host;
            for i in 0..6 {
                let p = exe.run_profiled(&[])?;
                clock = p.clock;
                if i > 0 {
                    best = best.min(p.span_ns);
                }
            }
            clock.to_string()
        }
        OpenedBackend::Cpu(c) => {
            let mut exe = c.compile(&graph)?;
            for i in 0..6 {
                let t0 = Instant::now();
                exe.run(&[])?;
                if i > 0 {
                    best = best.min(t0.elapsed().as_secs_f64() * 1e9);
                }
            }
            "host clock".to_string()
        }
    };
    Ok(CopyBandwidth {
        bytes,
        gbps: 2.0 * bytes as f64 / best,
        clock,
    })
}

/// Profiles `steps` steps of `n` tokens each (1: decode steps) at position `fill` (after
/// warm-up).
fn profile_steps(
    s: &mut Session,
    gpu: &wgllm_webgpu::WebGpuBackend,
    fill: usize,
    (steps, n): (usize, usize),
    tokens: &mut Tokens,
) -> Result<Profile> {
    let n_vocab = s.architecture().n_vocab();
    s.reset();
    if fill > 0 {
        s.eval(&tokens.take(fill, n_vocab))?;
    }
    for t in tokens.take(WARM_STEPS, n_vocab) {
        s.eval(&[t])?;
    }
    let position = s.n_past();
    // First the steps as they run unprofiled, only their ends timed...
    gpu.take_profiles();
    let mut wall_ns = 0.0;
    for _ in 0..steps {
        let ids = tokens.take(n, n_vocab);
        s.truncate(position);
        gpu.set_profiling(Profiling::Span);
        let t0 = Instant::now();
        let r = s.eval(&ids);
        wall_ns += t0.elapsed().as_secs_f64() * 1e9;
        gpu.set_profiling(Profiling::Off);
        r?;
    }
    let spans = gpu.take_profiles();
    let per_step = |f: fn(&RunProfile) -> f64| spans.iter().map(f).sum::<f64>() / steps as f64;
    let (step_span_ns, step_encode_ns) = (per_step(|p| p.span_ns), per_step(|p| p.encode_ns));
    // ... then with a timestamp around every dispatch, at the same position.
    let mut runs = Vec::with_capacity(steps);
    for _ in 0..steps {
        let ids = tokens.take(n, n_vocab);
        s.truncate(position);
        gpu.set_profiling(Profiling::Dispatches);
        let r = s.eval(&ids);
        gpu.set_profiling(Profiling::Off);
        r?;
        // One eval may run several executables; together they are one step.
        let Some(run) = RunProfile::merged(&gpu.take_profiles()) else {
            bail!("the profiled step ran no profiled graph");
        };
        runs.push(run);
    }
    let runs_n = runs.len().max(1) as f64;
    let mean = |f: fn(&RunProfile) -> f64| runs.iter().map(f).sum::<f64>() / runs_n;
    Ok(Profile {
        clock: runs.first().map_or(Clock::Host, |r| r.clock),
        steps: runs.len(),
        tokens: n,
        position,
        families: families(&runs),
        dispatches: mean(|r| r.dispatches.len() as f64),
        dispatch_ns: mean(RunProfile::dispatch_ns),
        span_ns: mean(|r| r.span_ns),
        encode_ns: mean(|r| r.encode_ns),
        step_wall_ns: wall_ns / steps.max(1) as f64,
        step_span_ns,
        step_encode_ns,
    })
}

/// Everything one run of `wgllm bench` measured.
struct Report {
    model: ModelInfo,
    backend: String,
    adapter: String,
    kv_type: DType,
    n_ctx: usize,
    copy: Option<CopyBandwidth>,
    /// How tg decodes: greedy, or the sampler drawing on the device.
    tg_sampling: Option<SamplerConfig>,
    rows: Vec<Row>,
    profile: Option<Profile>,
}

/// Runs the sweep and prints the report.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let Some(kv_type) = DType::from_name(&args.kv_type)
        .filter(|d| matches!(d, DType::F16 | DType::F32 | DType::Q8_0 | DType::Q4_0))
    else {
        bail!(
            "'{}' is not a KV cache type (f16, q8_0, q4_0, f32)",
            args.kv_type
        );
    };
    if args.reps == 0 {
        bail!("-r must be at least 1");
    }
    if args.ubatch.contains(&0) {
        bail!("--ubatch must be at least 1");
    }
    let pp: Vec<usize> = args.n_prompt.iter().copied().filter(|&p| p > 0).collect();
    let tg: Vec<usize> = args.n_gen.iter().copied().filter(|&n| n > 0).collect();
    if pp.is_empty() && tg.is_empty() && !args.profile {
        bail!("nothing to measure: every -p and -n is 0");
    }
    let path = super::pull::resolve_model(args.model.as_deref(), &args.hub)?;
    if wgllm_speech::open::is_whisper_file(&path) {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        return super::bench_speech::run(args, &path, &name, out);
    }
    let file = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    if wgllm_models::embed::is_embedding_model(&file) {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        return super::bench_embed::run(args, &file, &name, out);
    }
    let arch = Architecture::from_gguf(&file)?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    let model = ModelInfo::new(name, &file, &arch, kv_type)?;
    let (backend, adapter) = args.backend.open_typed()?;
    let fill = tg.first().copied().unwrap_or(0) / 2;
    if args.profile_tokens == 0 {
        bail!("--profile-tokens must be at least 1");
    }
    let profile_len = fill + WARM_STEPS + args.profile_tokens;
    let deepest = args.depth.iter().copied().max().unwrap_or(0);
    let need = pp
        .iter()
        .chain(&tg)
        .map(|&t| deepest + t)
        .chain(args.profile.then_some(profile_len))
        .max()
        .unwrap_or(1);
    let n_ctx = args.ctx.unwrap_or(need);
    if n_ctx < need {
        bail!("--ctx {n_ctx} is shorter than the longest test ({need} tokens)");
    }
    // Speed past the trained context is still speed: llama-bench times it too.
    if n_ctx > arch.n_ctx_train() {
        eprintln!(
            "wgllm bench: the tests need a context of {n_ctx} tokens, past the {} the model was trained for (timed all the same)",
            arch.n_ctx_train()
        );
    }
    let copy = match tg.is_empty() && !args.profile {
        true => None,
        false => {
            eprintln!("wgllm bench: measuring copy bandwidth");
            Some(copy_bandwidth(&backend)?)
        }
    };
    let mut tokens = Tokens(args.seed);
    let sampling = args.sample.then_some(SamplerConfig {
        seed: args.seed,
        ..SamplerConfig::default()
    });
    let mut rows = Vec::new();
    let mut profile = None;
    for (k, &ubatch) in args.ubatch.iter().enumerate() {
        let cfg = SessionConfig {
            n_ctx,
            ubatch,
            kv_dtype: kv_type,
            all_logits: false,
        };
        let t0 = Instant::now();
        let mut session = Session::new(backend.as_dyn(), &file, cfg)?;
        eprintln!(
            "wgllm bench: {} on {adapter}, ubatch {ubatch}, context {n_ctx}, loaded in {:.2} s",
            model.name,
            t0.elapsed().as_secs_f64()
        );
        let tests = pp.iter().map(|&p| Test::Pp(p));
        let tests: Vec<Test> = match k {
            0 => tests.chain(tg.iter().map(|&n| Test::Tg(n))).collect(),
            _ => tests.collect(),
        };
        for &depth in &args.depth {
            for &test in &tests {
                let mut row = Row {
                    test,
                    depth,
                    ubatch,
                    samples: vec![],
                };
                eprintln!("wgllm bench: {} ...", row.name());
                row.samples = run_test(
                    &mut session,
                    (test, depth),
                    args.reps,
                    &mut tokens,
                    sampling,
                )
                .with_context(|| format!("running {}", row.name()))?;
                rows.push(row);
            }
        }
        if k == 0 && args.profile {
            profile = match &backend {
                OpenedBackend::WebGpu(g) => Some(profile_steps(
                    &mut session,
                    g,
                    fill,
                    (args.profile_steps.max(1), args.profile_tokens),
                    &mut tokens,
                )?),
                OpenedBackend::Cpu(_) => {
                    eprintln!("wgllm bench: --profile needs the webgpu backend; skipped");
                    None
                }
            };
        }
    }
    let report = Report {
        model,
        backend: backend.as_dyn().name(),
        adapter,
        kv_type,
        n_ctx,
        copy,
        tg_sampling: sampling,
        rows,
        profile,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{:#}\n", to_json(&report)))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    match args.output {
        Format::Md => write_md(&report, out)?,
        Format::Json => writeln!(out, "{:#}", to_json(&report))?,
        Format::Csv => write_csv(&report, out)?,
    }
    Ok(())
}

/// `4.33 GiB`, `82.1 MiB`, as llama-bench writes sizes.
pub(crate) fn size(bytes: u64) -> String {
    match bytes >= 1 << 30 {
        true => format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64),
        false => format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64),
    }
}

/// `8.03 B`, `134.52 M`, `0.06 M`.
fn count(n: u64) -> String {
    match n >= 1_000_000_000 {
        true => format!("{:.2} B", n as f64 / 1e9),
        false => format!("{:.2} M", n as f64 / 1e6),
    }
}

/// At least three significant digits (rates on a software adapter are small).
fn sig(x: f64) -> String {
    match x.abs() {
        a if a >= 100.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        a if a >= 1.0 => format!("{x:.2}"),
        _ => format!("{x:.3e}"),
    }
}

fn write_md(r: &Report, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "model {}: {} ({} bytes), {} params | {} | kv {} | ctx {}",
        r.model.name,
        size(r.model.size),
        r.model.size,
        count(r.model.params),
        r.adapter,
        r.kv_type,
        r.n_ctx
    )?;
    if let Some(c) = &r.copy {
        writeln!(
            out,
            "copy bandwidth: {} GB/s (f32 copy of {} MiB, read + write, {})",
            sig(c.gbps),
            c.bytes >> 20,
            c.clock
        )?;
    }
    writeln!(out, "tg decoding: {}", sampling_name(r.tg_sampling))?;
    writeln!(out)?;
    writeln!(
        out,
        "| model | size | params | backend | ubatch | test | t/s | B/token | GB/s | of copy |"
    )?;
    writeln!(
        out,
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )?;
    for row in &r.rows {
        let (b, gbps, frac) = match roofline(row, &r.model, r.copy.as_ref()) {
            Some((b, g, f)) => (
                format!("{:.3e}", b),
                sig(g),
                f.map_or("-".into(), |f| format!("{:.1}%", 100.0 * f)),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2} ± {:.2} | {b} | {gbps} | {frac} |",
            r.model.name,
            size(r.model.size),
            count(r.model.params),
            r.backend,
            row.ubatch,
            row.name(),
            row.mean(),
            row.stddev()
        )?;
    }
    if let Some(p) = &r.profile {
        writeln!(out)?;
        writeln!(
            out,
            "{}-token step profile ({}, mean of {} steps at position {}): {:.0} dispatches per \
             step; as run: {:.1} us a step on the host, GPU first start to last end {:.1} us, \
             CPU encode + submit {:.1} us; with a timestamp around every dispatch: GPU busy \
             {:.1} us (first start to last end {:.1} us)",
            p.tokens,
            p.clock,
            p.steps,
            p.position,
            p.dispatches,
            p.step_wall_ns / 1e3,
            p.step_span_ns / 1e3,
            p.step_encode_ns / 1e3,
            p.dispatch_ns / 1e3,
            p.span_ns / 1e3,
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "| kernel family | dispatches | time (us) | share | GB/s | of copy | GFLOP/s |"
        )?;
        writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")?;
        for f in &p.families {
            let of_copy = r
                .copy
                .as_ref()
                .map_or("-".into(), |c| format!("{:.1}%", 100.0 * f.gbps() / c.gbps));
            writeln!(
                out,
                "| {} | {:.0} | {:.1} | {:.1}% | {} | {of_copy} | {} |",
                f.family,
                f.dispatches,
                f.ns / 1e3,
                100.0 * f.ns / p.dispatch_ns.max(f64::MIN_POSITIVE),
                sig(f.gbps()),
                f.gflops().map_or("-".into(), sig)
            )?;
        }
    }
    Ok(())
}

fn to_json(r: &Report) -> Value {
    let results: Vec<Value> = r
        .rows
        .iter()
        .map(|row| {
            let (n_prompt, n_gen) = match row.test {
                Test::Pp(p) => (p, 0),
                Test::Tg(n) => (0, n),
            };
            let mut v = json!({
                "test": row.name(),
                "n_prompt": n_prompt,
                "n_gen": n_gen,
                "n_depth": row.depth,
                "n_ubatch": row.ubatch,
                "avg_ts": row.mean(),
                "stddev_ts": row.stddev(),
                "samples_ts": row.samples,
            });
            if let Some((bytes, gbps, frac)) = roofline(row, &r.model, r.copy.as_ref()) {
                v["bytes_per_token"] = json!(bytes);
                v["gbps"] = json!(gbps);
                v["copy_fraction"] = json!(frac);
            }
            v
        })
        .collect();
    let profile = r.profile.as_ref().map(|p| {
        json!({
            "clock": p.clock.to_string(),
            "steps": p.steps,
            "tokens": p.tokens,
            "position": p.position,
            "dispatches_per_step": p.dispatches,
            "gpu_dispatch_ns": p.dispatch_ns,
            "gpu_span_ns": p.span_ns,
            "cpu_encode_submit_ns": p.encode_ns,
            "step_wall_ns": p.step_wall_ns,
            "step_gpu_span_ns": p.step_span_ns,
            "step_cpu_encode_submit_ns": p.step_encode_ns,
            "families": p.families.iter().map(|f| json!({
                "family": f.family,
                "dispatches": f.dispatches,
                "ns": f.ns,
                "share": f.ns / p.dispatch_ns.max(f64::MIN_POSITIVE),
                "bytes": f.bytes,
                "gbps": f.gbps(),
                "gflops": f.gflops(),
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "model": r.model.name,
        "model_size": r.model.size,
        "model_n_params": r.model.params,
        "weight_bytes_per_token": r.model.weight_bytes_per_token,
        "kv_bytes_per_position": r.model.kv_bytes_per_position,
        "backend": r.backend,
        "adapter": r.adapter,
        "kv_type": r.kv_type.to_string(),
        "n_ctx": r.n_ctx,
        "copy": r.copy.as_ref().map(|c| json!({
            "bytes": c.bytes,
            "gbps": c.gbps,
            "clock": c.clock,
        })),
        "tg_sampling": sampling_name(r.tg_sampling),
        "results": results,
        "profile": profile,
    })
}

/// How tg decodes, in words.
fn sampling_name(s: Option<SamplerConfig>) -> String {
    match s {
        None => "greedy".into(),
        Some(c) => format!(
            "sampled on the device (temperature {}, top-k {}, top-p {}, min-p {}, seed {})",
            c.temperature, c.top_k, c.top_p, c.min_p, c.seed
        ),
    }
}

/// Quotes a CSV field when it needs it.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_csv(r: &Report, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "model,model_size,model_n_params,backend,adapter,kv_type,n_ctx,n_ubatch,n_prompt,n_gen,\
         n_depth,avg_ts,stddev_ts,bytes_per_token,gbps,copy_fraction"
    )?;
    for row in &r.rows {
        let (n_prompt, n_gen) = match row.test {
            Test::Pp(p) => (p, 0),
            Test::Tg(n) => (0, n),
        };
        let (b, g, f) = match roofline(row, &r.model, r.copy.as_ref()) {
            Some((b, g, f)) => (
                b.to_string(),
                g.to_string(),
                f.map_or(String::new(), |f| f.to_string()),
            ),
            None => Default::default(),
        };
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{n_prompt},{n_gen},{},{},{},{b},{g},{f}",
            csv_field(&r.model.name),
            r.model.size,
            r.model.params,
            r.backend,
            csv_field(&r.adapter),
            r.kv_type,
            r.n_ctx,
            row.ubatch,
            row.depth,
            row.mean(),
            row.stddev()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};

    /// A decode step reads the weights but the embedding table, and of a mixture of experts'
    /// tensors only the experts a token uses (2 of 8 here).
    #[test]
    fn bytes_per_token_count_the_experts_a_token_uses() {
        let info = |arch| {
            let bytes = model_gguf(arch, &LlamaShape::TINY, DType::F32, 1).unwrap();
            let file = GgufFile::from_bytes(bytes.into()).unwrap();
            let arch = Architecture::from_gguf(&file).unwrap();
            let m = ModelInfo::new("m".into(), &file, &arch, DType::F16).unwrap();
            (file, m)
        };
        let (file, m) = info(SynthArch::Qwen3Moe {
            head_dim: 32,
            n_expert: 8,
            n_used: 2,
            n_ff_exp: 64,
        });
        let size = |pred: &dyn Fn(&str) -> bool| -> u64 {
            file.tensors()
                .iter()
                .filter(|t| pred(t.name()))
                .map(|t| t.size())
                .sum()
        };
        let experts = size(&|n| n.ends_with("_exps.weight"));
        let rest = size(&|n| !n.ends_with("_exps.weight") && n != "token_embd.weight");
        assert!(experts > 0);
        assert_eq!(m.weight_bytes_per_token, rest + experts / 4);
        let (file, m) = info(SynthArch::Llama);
        let embd = file.tensor("token_embd.weight").unwrap().size();
        assert_eq!(m.weight_bytes_per_token, m.size - embd);
    }
}
