//! The one place this crate reads the environment.

use std::path::PathBuf;

/// Where downloaded models live: `$XDG_CACHE_HOME/wgllm/models`, else `~/.cache/wgllm/models`,
/// else `./.wgllm-cache/models` when neither variable is set.
pub fn model_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(|| PathBuf::from(".wgllm-cache"));
    base.join("wgllm").join("models")
}
