//! Embeddings against an independent reference: the fixtures `scripts/reference/
//! gen_embed_fixtures.py` writes (token ids from the `tokenizers` package, mean-pooled
//! embeddings from a numpy forward pass in f64), checked on any backend by the real-model tests.

use serde::Deserialize;
use wgllm_core::Backend;
use wgllm_gguf::GgufFile;

use crate::embed::{cosine, EmbedConfig, Embedder, Truncate};
use crate::error::ModelError;

/// One fixture text.
#[derive(Clone, Debug, Deserialize)]
pub struct EmbedCase {
    pub text: String,
    pub ids: Vec<u32>,
    /// Unnormalised, as the model's pooling leaves it.
    pub embedding: Vec<f32>,
}

/// A fixture file.
#[derive(Clone, Debug, Deserialize)]
pub struct EmbedFixture {
    pub texts: Vec<EmbedCase>,
}

/// How one text compared.
#[derive(Clone, Debug)]
pub struct EmbedReport {
    pub text: String,
    /// Our ids, when they differ from the reference's.
    pub ids_differ: Option<Vec<u32>>,
    /// Cosine similarity with the reference embedding, embedded in one batch with all texts.
    pub cosine_batched: f64,
    /// The same, embedded alone.
    pub cosine_alone: f64,
    /// Largest relative difference of the norms (pooling scales, normalisation does not).
    pub norm_error: f64,
}

impl EmbedFixture {
    /// Parses a fixture's JSON.
    pub fn parse(json: &str) -> Result<EmbedFixture, serde_json::Error> {
        serde_json::from_str(json)
    }
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt()
}

/// Tokenizes and embeds every fixture text on `backend`, all in one batch and each alone.
pub fn compare_embeddings(
    backend: &dyn Backend,
    file: &GgufFile,
    fx: &EmbedFixture,
) -> Result<Vec<EmbedReport>, ModelError> {
    let mut e = Embedder::new(file, EmbedConfig::default())?;
    let ids = fx
        .texts
        .iter()
        .map(|c| e.tokenize(&c.text, Truncate::No))
        .collect::<Result<Vec<_>, _>>()?;
    let batched = e.embed_ids(backend, &ids, false)?;
    let mut out = Vec::new();
    for ((case, ids), got) in fx.texts.iter().zip(&ids).zip(&batched) {
        let alone = e.embed_ids(backend, std::slice::from_ref(ids), false)?;
        let (nr, ng) = (norm(&case.embedding), norm(got));
        out.push(EmbedReport {
            text: case.text.clone(),
            ids_differ: (ids != &case.ids).then(|| ids.clone()),
            cosine_batched: cosine(got, &case.embedding),
            cosine_alone: cosine(&alone[0], &case.embedding),
            norm_error: (ng - nr).abs() / nr.max(1e-30),
        });
    }
    Ok(out)
}

/// `Err` naming every text whose ids differ or whose cosine is below `min_cosine` (or whose
/// norm is off by more than `1 - min_cosine`, ten times over).
pub fn embed_verdict(reports: &[EmbedReport], min_cosine: f64) -> Result<(), String> {
    let mut bad = Vec::new();
    for r in reports {
        if let Some(ids) = &r.ids_differ {
            bad.push(format!(
                "{:?}: ids {ids:?} differ from the reference",
                r.text
            ));
        }
        let worst = r.cosine_batched.min(r.cosine_alone);
        if worst.is_nan() || worst < min_cosine {
            bad.push(format!(
                "{:?}: cosine {:.7} batched, {:.7} alone (want >= {min_cosine})",
                r.text, r.cosine_batched, r.cosine_alone
            ));
        }
        if r.norm_error.is_nan() || r.norm_error > 10.0 * (1.0 - min_cosine) {
            bad.push(format!("{:?}: norm off by {:.2e}", r.text, r.norm_error));
        }
    }
    match bad.is_empty() {
        true => Ok(()),
        false => Err(bad.join("\n")),
    }
}

/// The pulled checkpoint of known model `name` (`wgllm pull minilm`) converted to `dtype`, in
/// the temporary folder (converted anew each call, under a name of this process's).
#[cfg(not(target_arch = "wasm32"))]
pub fn converted_checkpoint(
    name: &str,
    dtype: wgllm_core::DType,
) -> Result<std::path::PathBuf, String> {
    let model = crate::pull::find(name).map_err(|e| e.to_string())?;
    let dir = crate::pull::checkpoint_dir(model, &crate::config::model_cache_dir());
    if !dir.join("config.json").exists() {
        return Err(format!(
            "{} has no checkpoint: run `wgllm pull {name}` first",
            dir.display()
        ));
    }
    let out = std::env::temp_dir().join(format!(
        "wgllm-{name}-{}-{}.gguf",
        dtype.name(),
        std::process::id()
    ));
    crate::convert::convert(&dir, dtype, &out, |_, _| {}).map_err(|e| e.to_string())?;
    Ok(out)
}
