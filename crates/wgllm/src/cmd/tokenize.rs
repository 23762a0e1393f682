//! `wgllm tokenize`: a model's token ids for a text, one per line (like llama-tokenize).

use std::io::Write;

use anyhow::Result;
use clap::Args as ClapArgs;
use wgllm_gguf::GgufFile;
use wgllm_models::tokenizer::Tokenizer;

/// Arguments of `wgllm tokenize`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// GGUF model file, known model name or `hf:OWNER/REPO/FILE.gguf` (default: smollm2).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub hub: super::pull::HubArgs,
    /// Text to tokenize.
    pub text: String,
    /// Do not add BOS/EOS even where the model adds them.
    #[arg(long)]
    pub no_special: bool,
    /// Also print each token's text.
    #[arg(long)]
    pub show_pieces: bool,
}

/// Prints the ids.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let path = super::pull::resolve_model(args.model.as_deref(), &args.hub)?;
    let file = GgufFile::open(&path)?;
    let tok = Tokenizer::from_gguf(&file)?;
    for id in tok.encode(&args.text, !args.no_special)? {
        if args.show_pieces {
            writeln!(out, "{id}\t{:?}", String::from_utf8_lossy(&tok.piece(id)))?;
        } else {
            writeln!(out, "{id}")?;
        }
    }
    Ok(())
}
