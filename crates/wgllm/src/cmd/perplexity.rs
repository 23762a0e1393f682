//! `wgllm perplexity`: the quality check to run after any kernel change (llama-perplexity's
//! method and output line).

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use wgllm_models::perplexity::perplexity;

use super::run::ModelArgs;

/// Arguments of `wgllm perplexity`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: std::path::PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Prints per-chunk progress on stderr and `PPL = X +/- Y` on stdout.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let n_ctx = args.model.ctx;
    // Each chunk runs in steps of `--ubatch` tokens: every step's logits are read whole, so
    // the step, not the chunk, sizes the largest tensor (256 × Gemma's 262,144-entry vocabulary
    // is 256 MiB, WebGPU's default largest buffer).
    let mut margs = args.model.clone();
    margs.ubatch = margs.ubatch.min(n_ctx);
    let mut m = margs.load(true)?;
    let tokens = m.tokenizer.encode(&text, true)?;
    let bos = if m.tokenizer.adds_bos() {
        m.tokenizer.bos()
    } else {
        None
    };
    eprintln!(
        "wgllm: {} tokens, {} chunks of {n_ctx}",
        tokens.len(),
        tokens.len() / n_ctx
    );
    let p = perplexity(&mut m.session, &tokens, n_ctx, bos, |i, n, ppl| {
        eprint!("\r[{i}/{n}] {ppl:.4}")
    })?;
    eprintln!();
    writeln!(out, "PPL = {:.4} +/- {:.5}", p.ppl, p.ppl_err)?;
    Ok(())
}
