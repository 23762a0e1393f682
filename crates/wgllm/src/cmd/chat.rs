//! `wgllm chat`: an interactive conversation through the model's chat template. Each turn
//! re-renders the whole conversation and evaluates only the tokens after the part the KV cache
//! already holds. When the conversation outgrows the context, its oldest turns after the system
//! message are dropped (and it says so); `/clear`, `/save FILE` and `/load FILE` manage it.

use std::io::{BufRead, Write};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use wgllm_models::generate::{generate, reusable_prefix};
use wgllm_models::sampler::Sampler;
use wgllm_models::tokenizer::{ChatMessage, Tokenizer};

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

/// What the commands of a chat line do.
const HELP: &str = "commands: /clear (start over, keeping the system message), /save FILE, \
                    /load FILE (the conversation as a JSON array of messages), /help; an empty \
                    line quits";

/// Reads user turns from stdin (one line each; an empty line or end of input quits) and streams
/// the answers to `out`.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let mut m = args.model.load(false)?;
    note_missing_template(&m.tokenizer);
    let mut sampler = Sampler::new(args.sampling.config());
    let system: Vec<ChatMessage> = args
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.clone()))
        .collect();
    let mut messages = system.clone();
    let mut cached: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(cmd) = line.strip_prefix('/') {
            match command(cmd, &mut messages, &system) {
                Ok(said) => eprintln!("[{said}]"),
                Err(e) => eprintln!("error: {e:#}"),
            }
            continue;
        }
        messages.push(ChatMessage::new("user", line));
        let n_ctx = m.session.n_ctx();
        let reserve = args.n_predict.min(n_ctx / 4).max(1);
        let (ids, dropped) = fit(&m.tokenizer, &mut messages, n_ctx - reserve)?;
        if dropped > 0 {
            eprintln!("[context full ({n_ctx} tokens): dropped the {dropped} oldest message(s)]");
        }
        if ids.len() + reserve > n_ctx {
            messages.pop();
            eprintln!(
                "error: this message takes {} tokens with the conversation's start; the \
                 context holds {n_ctx} (-c) with {reserve} for the answer: not sent",
                ids.len()
            );
            continue;
        }
        // Reuse the cached prefix; evaluate the rest.
        let common = reusable_prefix(&cached, &ids);
        m.session.truncate(common);
        let mut answer = String::new();
        let stats = generate(
            &mut m.session,
            &m.tokenizer,
            &mut sampler,
            &ids[common..],
            args.n_predict.min(n_ctx - ids.len()),
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

/// The conversation's tokens, after dropping its oldest messages (the system message stays,
/// and the last one) until they fit in `room` tokens where they can; how many were dropped.
fn fit(tok: &Tokenizer, messages: &mut Vec<ChatMessage>, room: usize) -> Result<(Vec<u32>, usize)> {
    let mut dropped = 0;
    loop {
        let ids = tok.chat_ids(messages)?;
        let first = messages.iter().take_while(|m| m.role == "system").count();
        if ids.len() <= room || first + 1 >= messages.len() {
            return Ok((ids, dropped));
        }
        // A whole turn goes: the oldest message and the replies up to the next user message.
        let end = (first + 1..messages.len() - 1)
            .find(|&i| messages[i].role == "user")
            .unwrap_or(messages.len() - 1);
        dropped += end - first;
        messages.drain(first..end);
    }
}

/// Runs the chat command `cmd` (after its `/`); what it did.
fn command(cmd: &str, messages: &mut Vec<ChatMessage>, system: &[ChatMessage]) -> Result<String> {
    let (name, arg) = cmd.split_once(' ').unwrap_or((cmd, ""));
    let arg = arg.trim();
    let need_file = || match arg.is_empty() {
        true => anyhow::bail!("/{name} needs a file name"),
        false => Ok(arg),
    };
    Ok(match name {
        "clear" => {
            *messages = system.to_vec();
            "conversation cleared".into()
        }
        "save" => {
            let f = need_file()?;
            std::fs::write(f, serde_json::to_string_pretty(messages)? + "\n")
                .with_context(|| format!("writing {f}"))?;
            format!("saved {} messages to {f}", messages.len())
        }
        "load" => {
            let f = need_file()?;
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {f}"))?;
            let loaded: Vec<ChatMessage> = serde_json::from_str(&text).with_context(|| {
                format!("{f} is not a conversation (a JSON array of {{\"role\", \"content\"}})")
            })?;
            let n = loaded.len();
            *messages = loaded;
            format!("loaded {n} messages from {f}")
        }
        "help" => HELP.into(),
        _ => anyhow::bail!("unknown command /{name}; {HELP}"),
    })
}
