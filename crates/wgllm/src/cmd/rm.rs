//! `wgllm rm`: remove models from the cache.

use std::io::Write;

use anyhow::Result;
use clap::Args as ClapArgs;
use wgllm_models::cache;
use wgllm_models::config::model_cache_dir;

use super::bench::size;

/// Arguments of `wgllm rm`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Models to remove, as `wgllm list` names them: a known name (`smollm2`), an `hf:` spec,
    /// or a cached file's name or path. A known model's download goes with it.
    #[arg(required = true)]
    pub models: Vec<String>,
}

/// Removes each model, printing what went; stops at the first that cannot go.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let dir = model_cache_dir();
    let known = super::list::known();
    for name in &args.models {
        for (path, bytes) in cache::remove(&dir, super::list::hub_cache().as_deref(), name, &known)?
        {
            writeln!(out, "removed {} ({})", path.display(), size(bytes))?;
        }
    }
    Ok(())
}
