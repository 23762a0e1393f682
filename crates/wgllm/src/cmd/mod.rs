//! Subcommands, one module each. To add one: write `cmd/<name>.rs` with an `Args` struct (clap
//! derive) and a `run(args) -> anyhow::Result<()>`, then add a variant below and its `run` arm.

use std::io::{self, BufWriter, Write};

use clap::Subcommand;

pub mod gguf;
pub mod info;

/// Every `wgllm` subcommand.
#[derive(Subcommand)]
pub enum Command {
    /// Show a GGUF file's version, metadata (long values abbreviated), tensor table and totals.
    Info(info::Args),
    /// Low-level GGUF tools: look inside tensors.
    #[command(subcommand)]
    Gguf(gguf::Command),
}

impl Command {
    /// Runs the subcommand, writing its report to stdout.
    pub fn run(self) -> anyhow::Result<()> {
        let mut out = BufWriter::new(io::stdout().lock());
        match self {
            Command::Info(args) => info::run(&args, &mut out)?,
            Command::Gguf(cmd) => gguf::run(&cmd, &mut out)?,
        }
        out.flush()?;
        Ok(())
    }
}

/// True when `e` is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|io| io.kind() == io::ErrorKind::BrokenPipe)
}
