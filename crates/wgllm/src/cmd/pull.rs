//! `wgllm pull`: download a known model (or an `hf:` file) into the cache, verified by sha256.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use indicatif::ProgressDrawTarget;
use wgllm_models::config::{model_cache_dir, HubConfig};
use wgllm_models::hf::{self, HfSpec};
use wgllm_models::hf_tag::{self, TaggedSpec};
use wgllm_models::pull::{self, KNOWN_MODELS};

/// Where `hf:` models come from.
#[derive(ClapArgs, Debug, Clone)]
pub struct HubArgs {
    /// Hugging Face endpoint for `hf:` models (a mirror); default: $HF_ENDPOINT, else the public
    /// Hub. Gated or private repositories need a token in $HF_TOKEN.
    #[arg(long, value_name = "URL")]
    pub hf_endpoint: Option<String>,
}

/// Arguments of `wgllm pull`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Model to download (`smollm2`, `gemma3-270m`, `hf:OWNER/REPO/FILE.gguf[@REVISION]`, `hf:OWNER/REPO[:QUANT][@REVISION]`);
    /// without a name, list the known models.
    pub name: Option<String>,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Downloads the model (or lists the known ones) and prints its path.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let Some(name) = &args.name else {
        for m in KNOWN_MODELS
            .iter()
            .chain(wgllm_speech::pull::WHISPER_MODELS)
        {
            let state = if pull::cached(m, &model_cache_dir()).is_some() {
                "cached"
            } else {
                "not downloaded"
            };
            writeln!(
                out,
                "{:<16} {} — {} ({} bytes, {state})",
                m.name, m.file, m.about, m.size
            )?;
        }
        return Ok(());
    };
    let path = if HfSpec::is_hf(name) || wgllm_speech::pull::find(name).is_some() {
        resolve_model(Some(name), &args.hub)?
    } else {
        pull::pull(pull::find(name)?, &model_cache_dir())?
    };
    writeln!(out, "{}", path.display())?;
    Ok(())
}

/// Resolves `-m`: a path to a GGUF file, the name of a known model (pulled on first use), or
/// `hf:OWNER/REPO/FILE.gguf[@REVISION]` or `hf:OWNER/REPO[:QUANT]` (the file of that quant tag,
/// Q4_K_M by default), downloaded on first use. Without `-m`, the default model.
pub fn resolve_model(m: Option<&str>, hub: &HubArgs) -> Result<PathBuf> {
    let spec = m.unwrap_or(KNOWN_MODELS[0].name);
    if HfSpec::is_hf(spec) {
        let config = HubConfig::from_env(hub.hf_endpoint.clone());
        let hf_spec = match TaggedSpec::parse(spec) {
            Some(_) => hf_tag::resolve(spec, &config, &model_cache_dir())?,
            None => HfSpec::parse(spec)?,
        };
        let fetch = |s: &HfSpec| {
            hf::fetch(s, &config, &model_cache_dir(), ProgressDrawTarget::stderr())
                .with_context(|| format!("getting model '{spec}'"))
        };
        let first = fetch(&hf_spec)?;
        // A split model's other files, beside its first.
        for part in hf_spec.split_parts() {
            fetch(&part)?;
        }
        return Ok(first.path);
    }
    if let Some(known) = wgllm_speech::pull::find(spec) {
        return wgllm_speech::pull::pull(known, &model_cache_dir())
            .with_context(|| format!("getting model '{spec}'"));
    }
    if let Ok(known) = pull::find(spec) {
        return pull::pull(known, &model_cache_dir())
            .with_context(|| format!("getting model '{spec}'"));
    }
    let p = PathBuf::from(spec);
    if !p.exists() {
        anyhow::bail!(
            "model '{spec}' is neither a file, a known model ({}) nor hf:OWNER/REPO/FILE.gguf",
            KNOWN_MODELS
                .iter()
                .chain(wgllm_speech::pull::WHISPER_MODELS)
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(p)
}
