//! `wgllm bench` on an embedding model: embeddings/s for batches of `--batch` inputs of each
//! `-p` length (each input exactly that many tokens), timed over whole `Embedder::embed_ids`
//! calls: upload, every layer, pooling, normalisation and read-back, as a server's request pays
//! them (tokenization excluded). Mean ± stddev over `-r` runs after a warm-up. `--profile`
//! then times one more run of each shape kernel by kernel, grouped by kernel family.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Result};
use serde_json::json;
use wgllm_gguf::GgufFile;
use wgllm_models::embed::MIN_LEN;
use wgllm_models::{EmbedConfig, Embedder};
use wgllm_webgpu::profile::FamilyTime;

use super::backend::OpenedBackend;
use super::bench::{Args, Format};
use super::bench_profile;

/// Warm-up runs repeat for at least this long (the GPU's clocks climb under load).
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(1500);

/// One measured shape.
struct Row {
    batch: usize,
    len: usize,
    mean: f64,
    std: f64,
    /// `--profile`'s kernel families of one run, most expensive first.
    profile: Vec<FamilyTime>,
}

/// `n` inputs of `len` tokens as the tokenizer frames them (BOS or [CLS] first where it adds
/// one; [SEP] or EOS last where it ends with one), pseudo-random ids between (from `seed`).
fn inputs(e: &Embedder, n: usize, len: usize, seed: u64) -> Result<Vec<Vec<u32>>> {
    let tok = e.tokenizer();
    let framed = tok.encode_with("", true, false)?;
    let (first, last) = (framed.first().copied(), framed.get(1).copied());
    let vocab = (tok.vocab_size() as u64).min(e.n_vocab());
    // Past BERT's reserved and special ids (the first 1,000), in a vocabulary that has them.
    let lo = 1000.min(vocab / 2);
    let mut state = seed;
    Ok((0..n)
        .map(|_| {
            (0..len)
                .map(|i| match (i, first, last) {
                    (0, Some(f), _) => f,
                    (i, _, Some(l)) if i == len - 1 => l,
                    _ => {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (lo + (state >> 33) % (vocab - lo)) as u32
                    }
                })
                .collect()
        })
        .collect())
}

/// Times every (batch, length) pair and prints the table.
pub fn run(args: &Args, file: &GgufFile, name: &str, out: &mut impl Write) -> Result<()> {
    let (opened, desc) = args.backend.open_typed()?;
    let lens: Vec<usize> = args.n_prompt.iter().copied().filter(|&p| p > 0).collect();
    if lens.is_empty() || args.batch.contains(&0) {
        bail!("an embedding benchmark needs -p lengths and --batch sizes of at least 1");
    }
    let batch_tokens = args
        .batch
        .iter()
        .flat_map(|&b| {
            lens.iter()
                .map(move |&l| b * l.next_power_of_two().max(MIN_LEN as usize))
        })
        .max()
        .unwrap_or(1) as u32;
    let cfg = EmbedConfig {
        batch_tokens,
        max_seqs: args.batch.iter().copied().max().unwrap_or(1) as u32,
        ..EmbedConfig::default()
    };
    let mut e = Embedder::new(file, cfg)?;
    let backend = opened.as_dyn();
    if args.profile && !matches!(opened, OpenedBackend::WebGpu(_)) {
        eprintln!("wgllm bench: --profile needs the webgpu backend; skipped");
    }
    let mut rows = Vec::new();
    for &len in &lens {
        if len > e.max_tokens() {
            bail!(
                "-p {len}: the model takes at most {} tokens",
                e.max_tokens()
            );
        }
        for &batch in &args.batch {
            let ids = inputs(&e, batch, len, args.seed)?;
            let t0 = Instant::now();
            e.embed_ids(backend, &ids, true)?;
            while t0.elapsed() < WARM_UP {
                e.embed_ids(backend, &ids, true)?;
            }
            let mut secs = Vec::with_capacity(args.reps);
            for _ in 0..args.reps {
                let t = Instant::now();
                e.embed_ids(backend, &ids, true)?;
                secs.push(t.elapsed().as_secs_f64());
            }
            let rates: Vec<f64> = secs.iter().map(|s| batch as f64 / s).collect();
            let mean = rates.iter().sum::<f64>() / rates.len() as f64;
            let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
            let profile = match (&opened, args.profile) {
                (OpenedBackend::WebGpu(gpu), true) => {
                    bench_profile::profile_once(gpu, || Ok(e.embed_ids(gpu, &ids, true)?))?
                }
                _ => Vec::new(),
            };
            rows.push(Row {
                batch,
                len,
                mean,
                std: var.sqrt(),
                profile,
            });
        }
    }
    match args.output {
        Format::Json => {
            let rows: Vec<_> = rows
                .iter()
                .map(|r| {
                    let profile = bench_profile::to_json(&r.profile);
                    json!({"batch": r.batch, "tokens": r.len, "embeddings_per_s": r.mean, "stddev": r.std, "profile": profile})
                })
                .collect();
            writeln!(
                out,
                "{:#}",
                json!({"model": name, "backend": desc, "rows": rows})
            )?;
        }
        Format::Md | Format::Csv => {
            writeln!(
                out,
                "model: {name}, {} pooling, on {desc}",
                e.pooling().name()
            )?;
            writeln!(out)?;
            writeln!(out, "| batch | tokens | embeddings/s | tokens/s |")?;
            writeln!(out, "| ---: | ---: | ---: | ---: |")?;
            for r in &rows {
                writeln!(
                    out,
                    "| {} | {} | {:.1} ± {:.1} | {:.0} |",
                    r.batch,
                    r.len,
                    r.mean,
                    r.std,
                    r.mean * r.len as f64
                )?;
            }
            for r in rows.iter().filter(|r| !r.profile.is_empty()) {
                let title = format!("{} inputs of {} tokens, one run", r.batch, r.len);
                bench_profile::write_table(out, &title, &r.profile)?;
            }
        }
    }
    Ok(())
}
