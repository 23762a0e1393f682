//! `wgllm pull`: download a known model into the cache, verified by sha256.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use wgllm_models::config::model_cache_dir;
use wgllm_models::pull::{self, KNOWN_MODELS};

/// Arguments of `wgllm pull`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Model to download (`smollm2`, `gemma3-270m`); without a name, list the known models.
    pub name: Option<String>,
}

/// Downloads the model (or lists the known ones) and prints its path.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let Some(name) = &args.name else {
        for m in KNOWN_MODELS {
            let state = if pull::cached(m, &model_cache_dir()).is_some() {
                "cached"
            } else {
                "not downloaded"
            };
            writeln!(
                out,
                "{:<12} {} — {} ({} bytes, {state})",
                m.name, m.file, m.about, m.size
            )?;
        }
        return Ok(());
    };
    let path = pull::pull(pull::find(name)?, &model_cache_dir())?;
    writeln!(out, "{}", path.display())?;
    Ok(())
}

/// Resolves `-m`: a path to a GGUF file, or the name of a known model (pulled on first use).
/// Without `-m`, the default model.
pub fn resolve_model(m: Option<&str>) -> Result<PathBuf> {
    let spec = m.unwrap_or(KNOWN_MODELS[0].name);
    if let Ok(known) = pull::find(spec) {
        return pull::pull(known, &model_cache_dir())
            .with_context(|| format!("getting model '{spec}'"));
    }
    let p = PathBuf::from(spec);
    if !p.exists() {
        anyhow::bail!(
            "model '{spec}' is neither a file nor a known model ({})",
            KNOWN_MODELS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(p)
}
