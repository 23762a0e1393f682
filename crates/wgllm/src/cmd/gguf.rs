//! `wgllm gguf …`: low-level tools over GGUF files.
//!
//! `wgllm gguf dequant FILE TENSOR [--rows N]` decodes a tensor with the bit-exact CPU reference
//! (`wgllm_core::quant::dequantize`) and prints it as f32, one row (`ne[0]` values) a line. Values
//! are printed as Rust's `Debug` does: the shortest text that reads back to the same f32.
//!
//! `wgllm gguf split FILE --parts N` writes FILE's model as N files `NAME-00001-of-0000N.gguf` …
//! beside it, as llama.cpp's `gguf-split` does; `-m NAME-00001-of-0000N.gguf` opens them all.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use clap::Subcommand;
use wgllm_gguf::GgufFile;

/// The `wgllm gguf` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Print a tensor's values as f32, one row (ne[0] values, space-separated) per line.
    ///
    /// Rows are printed in storage order: ne[1] varies fastest, then ne[2], then ne[3].
    Dequant(DequantArgs),
    /// Write the model as several files of about equal size (`NAME-00001-of-0000N.gguf` …),
    /// as llama.cpp's gguf-split does: a model opens from its first file, the others beside it.
    Split(SplitArgs),
}

/// Arguments of `wgllm gguf split`.
#[derive(clap::Args)]
pub struct SplitArgs {
    /// The .gguf file.
    pub file: PathBuf,
    /// How many files to write.
    #[arg(long, value_name = "N")]
    pub parts: u32,
    /// Where to write them: `PREFIX-00001-of-0000N.gguf` … (default: FILE without `.gguf`).
    #[arg(short, long, value_name = "PREFIX")]
    pub output: Option<PathBuf>,
}

/// Arguments of `wgllm gguf dequant`.
#[derive(clap::Args)]
pub struct DequantArgs {
    /// The .gguf file.
    pub file: PathBuf,
    /// Name of the tensor (as listed by `wgllm info`).
    pub tensor: String,
    /// Print only the first N rows (default: all).
    #[arg(long, value_name = "N")]
    pub rows: Option<u64>,
}

/// Runs a `wgllm gguf` subcommand.
pub fn run(cmd: &Command, out: &mut impl Write) -> anyhow::Result<()> {
    match cmd {
        Command::Dequant(args) => dequant(args, out),
        Command::Split(args) => split(args, out),
    }
}

fn split(args: &SplitArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.file)?;
    let writers = wgllm_gguf::split::split_writers(&file, args.parts)
        .with_context(|| format!("splitting {}", args.file.display()))?;
    let prefix = args
        .output
        .clone()
        .unwrap_or_else(|| args.file.with_extension(""));
    let dir = prefix.parent().unwrap_or(std::path::Path::new(""));
    let name = prefix
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{} is not a file name", prefix.display()))?;
    for (i, w) in writers.iter().enumerate() {
        let path = dir.join(wgllm_gguf::split::part_name(name, i as u32 + 1, args.parts));
        let partial = path.with_extension("gguf.partial");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&partial)
                .with_context(|| format!("creating {}", partial.display()))?,
        );
        w.write_to(&mut f)
            .with_context(|| format!("writing {}", partial.display()))?;
        f.into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(())
}

fn dequant(args: &DequantArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.file)?;
    let t = file.tensor(&args.tensor).ok_or_else(|| {
        anyhow!(
            "no tensor named {:?} in {} (`wgllm info` lists them)",
            args.tensor,
            args.file.display()
        )
    })?;
    let layout = t.layout();
    let row_len = layout.ne[0];
    let row_bytes = t
        .dtype()
        .row_bytes(row_len)
        .ok_or_else(|| anyhow!("tensor {:?}: row size overflows", t.name()))?;
    let rows = args.rows.map_or(layout.nrows(), |n| n.min(layout.nrows()));
    let data = file.tensor_data(t)?;
    let row_len = usize::try_from(row_len)?;
    let mut values = vec![0f32; row_len];
    // `row_bytes` is at most the tensor size, which fits in memory.
    for src in data
        .chunks_exact(usize::try_from(row_bytes)?)
        .take(usize::try_from(rows)?)
    {
        wgllm_core::quant::dequantize(t.dtype(), src, &mut values)
            .with_context(|| format!("tensor {:?}", t.name()))?;
        let mut first = true;
        for v in &values {
            if !first {
                out.write_all(b" ")?;
            }
            first = false;
            write!(out, "{v:?}")?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}
