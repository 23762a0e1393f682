//! `wgllm chat`: an interactive conversation through the model's chat template. Each turn
//! re-renders the whole conversation and evaluates only the tokens after the part the KV cache
//! already holds.

use std::io::{BufRead, Write};

use anyhow::Result;
use clap::Args as ClapArgs;
use wgllm_models::generate::{generate, reusable_prefix};
use wgllm_models::sampler::Sampler;
use wgllm_models::tokenizer::ChatMessage;

use super::run::{note_missing_template, ModelArgs, SamplingArgs};

/// Arguments of `wgllm chat`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// A system message that starts the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// Tokens to generate at most per answer.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    pub n_predict: usize,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Reads user turns from stdin (one line each; an empty line or end of input quits) and streams
/// the answers to `out`.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let mut m = args.model.load(false)?;
    note_missing_template(&m.tokenizer);
    let mut sampler = Sampler::new(args.sampling.config());
    let mut messages: Vec<ChatMessage> = args
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.clone()))
        .collect();
    let mut cached: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        messages.push(ChatMessage::new(
            "user",
            line.trim_end_matches(['\r', '\n']),
        ));
        let ids = m.tokenizer.chat_ids(&messages)?;
        // Reuse the cached prefix; evaluate the rest.
        let common = reusable_prefix(&cached, &ids);
        m.session.truncate(common);
        let mut answer = String::new();
        let stats = generate(
            &mut m.session,
            &m.tokenizer,
            &mut sampler,
            &ids[common..],
            args.n_predict,
            |t| {
                answer.push_str(t);
                out.write_all(t.as_bytes())
                    .and_then(|_| out.flush())
                    .is_ok()
            },
        )?;
        writeln!(out)?;
        out.flush()?;
        eprintln!(
            "[{} tokens, {:.1} t/s]",
            stats.generated_tokens,
            stats.generate_tps()
        );
        // The cache holds the prompt and the answer's evaluated tokens; the next turn re-tokenizes
        // the answer, mostly (not always) into the same tokens: the common prefix decides.
        cached = [ids, stats.tokens].concat();
        cached.truncate(m.session.n_past());
        messages.push(ChatMessage::new("assistant", answer));
    }
    Ok(())
}
