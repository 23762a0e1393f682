//! `wgllm embed`: embeddings of texts with an embedding model (like llama-embedding), one JSON
//! array per input and line on stdout.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use wgllm_gguf::GgufFile;
use wgllm_models::arch::bert::Pooling;
use wgllm_models::{EmbedConfig, Embedder, Truncate};

use super::backend::BackendArgs;

/// `--pooling`: how token states become one embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PoolingChoice {
    /// One embedding per token (a JSON array of arrays per input).
    None,
    /// The mean over the input's tokens.
    Mean,
    /// The first token's ([CLS]).
    Cls,
    /// The last token's.
    Last,
}

impl From<PoolingChoice> for Pooling {
    fn from(p: PoolingChoice) -> Pooling {
        match p {
            PoolingChoice::None => Pooling::None,
            PoolingChoice::Mean => Pooling::Mean,
            PoolingChoice::Cls => Pooling::Cls,
            PoolingChoice::Last => Pooling::Last,
        }
    }
}

/// Arguments of `wgllm embed`.
#[derive(ClapArgs, Debug)]
#[command(after_help = "Examples:\n  \
    wgllm embed -m minilm \"A man is eating food.\" \"A man is eating bread.\" --normalize\n  \
    wgllm embed -m model.gguf -f texts.txt > vectors.jsonl   (one input per line of the file)")]
pub struct Args {
    /// Embedding model: a GGUF file (bert, or a decoder stating a pooling) or a known model
    /// name (`minilm`).
    #[arg(short = 'm', long = "model")]
    pub model: String,
    #[command(flatten)]
    pub hub: super::pull::HubArgs,
    /// Texts to embed, one embedding each.
    pub text: Vec<String>,
    /// Also embed every line of this file (`-` reads standard input); empty lines are skipped.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Scale every embedding to unit length (then a dot product is the cosine similarity).
    #[arg(long)]
    pub normalize: bool,
    /// Pooling instead of the model's own (`{arch}.pooling_type`).
    #[arg(long, value_enum)]
    pub pooling: Option<PoolingChoice>,
    /// Cut inputs longer than the model's positions to fit, instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// At most this many tokens (sequences × padded length) in one batch.
    #[arg(long, default_value_t = EmbedConfig::default().batch_tokens, value_name = "N")]
    pub batch_tokens: u32,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// The inputs: the texts given, then the file's non-empty lines.
fn inputs(args: &Args) -> Result<Vec<String>> {
    let mut texts = args.text.clone();
    if let Some(path) = &args.file {
        let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            let f =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            Box::new(std::io::BufReader::new(f))
        };
        for line in reader.lines() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            if !line.trim().is_empty() {
                texts.push(line);
            }
        }
    }
    if texts.is_empty() {
        bail!("nothing to embed: give texts as arguments or a file with -f");
    }
    Ok(texts)
}

/// Writes `v` as a JSON array.
fn write_vec(out: &mut impl Write, v: &[f32]) -> Result<()> {
    write!(out, "[")?;
    for (i, x) in v.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        write!(out, "{sep}{x}")?;
    }
    write!(out, "]")?;
    Ok(())
}

/// Embeds the inputs and prints one JSON array per input.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let texts = inputs(args)?;
    let path = super::pull::resolve_model(Some(&args.model), &args.hub)?;
    let file = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let (backend, desc) = args.backend.open()?;
    let cfg = EmbedConfig {
        batch_tokens: args.batch_tokens,
        pooling: args.pooling.map(Pooling::from),
        ..EmbedConfig::default()
    };
    let mut embedder = Embedder::new(&file, cfg)?;
    embedder.prepare(backend.as_ref())?;
    let truncate = match args.truncate {
        true => Truncate::Yes,
        false => Truncate::No,
    };
    let ids = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            embedder
                .tokenize(t, truncate)
                .with_context(|| format!("input {} ({} chars; --truncate cuts it)", i + 1, t.len()))
        })
        .collect::<Result<Vec<_>>>()?;
    let n_tokens: usize = ids.iter().map(Vec::len).sum();
    let bar = match args.file.is_some() {
        true => ProgressBar::new(ids.len() as u64).with_style(
            ProgressStyle::with_template(
                "wgllm: embedding [{bar:40}] {pos}/{len} inputs, {eta} left",
            )
            .expect("static template")
            .progress_chars("=> "),
        ),
        false => ProgressBar::hidden(),
    };
    let t0 = Instant::now();
    let vecs = embedder.embed_ids_with(backend.as_ref(), &ids, args.normalize, |n| {
        bar.set_position(n as u64)
    })?;
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    let dim = embedder.dim();
    for v in &vecs {
        if embedder.pooling() == Pooling::None {
            write!(out, "[")?;
            for (i, row) in v.chunks(dim).enumerate() {
                if i > 0 {
                    write!(out, ",")?;
                }
                write_vec(out, row)?;
            }
            writeln!(out, "]")?;
        } else {
            write_vec(out, v)?;
            writeln!(out)?;
        }
    }
    eprintln!(
        "wgllm embed: {} inputs ({n_tokens} tokens) in {:.3} s ({:.1} inputs/s), {dim} values each, {} pooling, on {desc}",
        vecs.len(),
        secs,
        vecs.len() as f64 / secs.max(1e-9),
        embedder.pooling().name(),
    );
    Ok(())
}
