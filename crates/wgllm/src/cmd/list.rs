//! `wgllm list`: the models in the cache, one line each.

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use wgllm_models::cache::{self, Origin};
use wgllm_models::config::model_cache_dir;
use wgllm_models::pull::{KnownModel, KNOWN_MODELS};

use super::bench::size;

/// Arguments of `wgllm list`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// One JSON object per model instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Every model `pull` and `hf:` know of, for naming cached files.
pub fn known() -> Vec<&'static KnownModel> {
    KNOWN_MODELS
        .iter()
        .chain(wgllm_speech::pull::WHISPER_MODELS)
        .collect()
}

/// The Hugging Face tools' cache, which `list` and `rm` cover too.
pub fn hub_cache() -> Option<std::path::PathBuf> {
    wgllm_models::config::HubConfig::from_env(None).hub_cache
}

/// Prints the cached models: name (what `-m` and `wgllm rm` take), architecture, weight type,
/// size, origin and path.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let dir = model_cache_dir();
    let models = cache::list(&dir, hub_cache().as_deref(), &known())
        .with_context(|| format!("reading the model cache {}", dir.display()))?;
    let origin = |o: &Origin| match o {
        Origin::Known(_) => "pull",
        Origin::Hub(_) => "hf",
        Origin::Other => "file",
    };
    if args.json {
        for m in &models {
            let v = serde_json::json!({
                "name": m.name(),
                "architecture": m.architecture.as_ref().ok(),
                "type": m.dtype.map(|d| d.to_string()),
                "bytes": m.bytes,
                "origin": origin(&m.origin),
                "path": m.path,
                "parts": m.parts,
                "error": m.architecture.as_ref().err(),
            });
            writeln!(out, "{v}")?;
        }
        return Ok(());
    }
    if models.is_empty() {
        writeln!(
            out,
            "no models in {} yet: `wgllm pull` lists what it can download",
            dir.display()
        )?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = models
        .iter()
        .map(|m| {
            let arch = match &m.architecture {
                Ok(a) => a.clone(),
                Err(_) => "unreadable".into(),
            };
            let name = match m.origin {
                Origin::Other => m
                    .path
                    .file_name()
                    .map_or_else(|| m.name(), |f| f.to_string_lossy().into_owned()),
                _ => m.name(),
            };
            vec![
                name,
                arch,
                m.dtype.map_or("-".into(), |d| d.to_string()),
                size(m.bytes),
                origin(&m.origin).into(),
                match m.parts.len() {
                    0 => m.path.display().to_string(),
                    n => format!("{} (+{n} parts)", m.path.display()),
                },
            ]
        })
        .collect();
    let head = ["NAME", "ARCH", "TYPE", "SIZE", "ORIGIN", "PATH"];
    let right = [false, false, false, true];
    super::table::write(out, "", &head, &right, &rows)?;
    Ok(())
}
