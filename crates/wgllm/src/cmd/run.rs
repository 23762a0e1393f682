//! `wgllm run`: complete a prompt (or answer one question with `--chat`), streaming the text to
//! stdout and the speeds to stderr, like llama.cpp's completion tool.

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use wgllm_core::DType;
use wgllm_gguf::GgufFile;
use wgllm_models::generate::generate;
use wgllm_models::sampler::{Sampler, SamplerConfig};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{Session, SessionConfig};

use super::backend::BackendArgs;

/// Sampling flags shared by `run` and `chat`.
#[derive(ClapArgs, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy decoding.
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep only the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than min-p times the most likely one.
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalize repeating recent tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Subtract from the logits of tokens already present (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Subtract per occurrence of tokens already present (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Random seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler configuration.
    pub fn config(&self) -> SamplerConfig {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed,
            ..SamplerConfig::default()
        }
    }
}

/// Model and context flags shared by the commands that load a model.
#[derive(ClapArgs, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file, a known model name (`smollm2`, `gemma3-270m`), `hf:OWNER/REPO/FILE.gguf` or
    /// `hf:OWNER/REPO:QUANT` (the file of that quant tag, Q4_K_M by default) (`@REVISION`
    /// optional); default: smollm2. Downloaded on first use.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub hub: super::pull::HubArgs,
    /// Context size in tokens (prompt + generation), capped at the model's training context.
    #[arg(short = 'c', long, default_value_t = 4096)]
    pub ctx: usize,
    /// Largest number of prompt tokens processed in one step.
    #[arg(long, default_value_t = 256)]
    pub ubatch: usize,
    /// KV cache type: f16, q8_0, q4_0 or f32.
    #[arg(long, default_value = "f16", value_parser = parse_kv_type)]
    pub kv_type: DType,
    #[command(flatten)]
    pub backend: BackendArgs,
}

fn parse_kv_type(s: &str) -> Result<DType, String> {
    match DType::from_name(s) {
        Some(d @ (DType::F16 | DType::F32 | DType::Q8_0 | DType::Q4_0)) => Ok(d),
        _ => Err(format!(
            "'{s}' is not a KV cache type (f16, q8_0, q4_0, f32)"
        )),
    }
}

/// A loaded model: file, tokenizer, session.
pub struct Loaded {
    pub tokenizer: Tokenizer,
    pub session: Session,
    pub backend: String,
}

impl ModelArgs {
    /// Loads the model and compiles its step graphs, reporting on stderr.
    pub fn load(&self, all_logits: bool) -> Result<Loaded> {
        let path = super::pull::resolve_model(self.model.as_deref(), &self.hub)?;
        let t0 = Instant::now();
        let file = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let (backend, desc, counters) = self.backend.open_counted()?;
        let arch = wgllm_models::Architecture::from_gguf(&file)?;
        let n_ctx = self.ctx.min(arch.n_ctx_train()).max(1);
        let cfg = SessionConfig {
            n_ctx,
            ubatch: self.ubatch,
            kv_dtype: self.kv_type,
            all_logits,
        };
        let total = file.tensors().iter().map(|t| t.size()).sum();
        let (session, loaded) = super::loading::with_progress(counters, total, || {
            Ok(Session::new(backend.as_ref(), &file, cfg)?)
        })?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().to_string(),
        );
        super::loading::report(&format!("{name} on {desc}, context {n_ctx}"), t0, loaded);
        Ok(Loaded {
            tokenizer,
            session,
            backend: desc,
        })
    }
}

/// Tells on stderr when a chat runs on a file without a chat template: its turns then take the
/// built-in format of its vocabulary (ChatML or Gemma's), and a base, not instruction-tuned,
/// model (the usual reason for the missing template) may answer with nonsense.
pub fn note_missing_template(tok: &Tokenizer) {
    if tok.chat_template().is_none() {
        eprintln!(
            "wgllm: note: the model has no chat template (tokenizer.chat_template); turns use the \
             built-in format of its vocabulary. A base model, not instruction-tuned, may not \
             answer like a chat model."
        );
    }
}

/// Arguments of `wgllm run`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The prompt to complete (or, with --chat, the question to answer).
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long)]
    pub chat: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Generates, streaming text to `out` and statistics to stderr.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let mut m = args.model.load(false)?;
    if args.chat {
        note_missing_template(&m.tokenizer);
    }
    let ids = m.tokenizer.prompt_ids(&args.prompt, args.chat)?;
    let mut sampler = Sampler::new(args.sampling.config());
    let mut write_err = None;
    let stats = generate(
        &mut m.session,
        &m.tokenizer,
        &mut sampler,
        &ids,
        args.n_predict,
        |text| match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                write_err = Some(e);
                false
            }
        },
    )?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    writeln!(out)?;
    out.flush()?;
    eprintln!(
        "wgllm: prompt {} tokens in {:.3} s ({:.1} t/s) | generated {} tokens in {:.3} s ({:.1} t/s) | {}",
        stats.prompt_tokens,
        stats.prompt_time.as_secs_f64(),
        stats.prompt_tps(),
        stats.generated_tokens,
        stats.generate_time.as_secs_f64(),
        stats.generate_tps(),
        m.backend
    );
    Ok(())
}
