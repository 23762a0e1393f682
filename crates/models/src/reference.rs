//! Checks against the fixtures of the independent numpy reference (`scripts/reference/`):
//! greedy continuations and top-20 logits of fixed prompts. Shared by the CPU and WebGPU
//! real-model tests.

use serde::Deserialize;
use wgllm_core::{Backend, DType};
use wgllm_gguf::GgufFile;

use crate::error::ModelError;
use crate::sampler::argmax;
use crate::session::{Session, SessionConfig};

/// Greedy steps whose reference top-1/top-2 logit gap is below this are near-ties that a
/// different (correct) summation order may break the other way; greedy comparison stops there.
pub const NEAR_TIE: f64 = 0.05;

/// A reference fixture (`crates/models/tests/fixtures/reference/<model>.json`), the parts the
/// checks read.
#[derive(Debug, Deserialize)]
pub struct Fixture {
    pub prompts: Vec<Prompt>,
}

/// One fixture prompt.
#[derive(Debug, Deserialize)]
pub struct Prompt {
    pub name: String,
    pub ids: Vec<u32>,
    pub greedy: Greedy,
    pub logits: Vec<Logits>,
}

/// The reference's greedy continuation.
#[derive(Debug, Deserialize)]
pub struct Greedy {
    pub ids: Vec<u32>,
    pub top2_margins: Vec<f64>,
}

/// The reference's 20 largest logits at one position of prompt + continuation.
#[derive(Debug, Deserialize)]
pub struct Logits {
    pub position: usize,
    pub top_ids: Vec<u32>,
    pub top_logits: Vec<f32>,
}

impl Fixture {
    /// Parses a fixture.
    pub fn parse(json: &str) -> Result<Fixture, serde_json::Error> {
        serde_json::from_str(json)
    }
}

/// How one prompt compared.
#[derive(Debug, Clone)]
pub struct PromptReport {
    pub name: String,
    /// Greedy steps before the reference's first near-tie (the steps that must agree).
    pub comparable: usize,
    /// Leading greedy steps that agree.
    pub agree: usize,
    pub steps: usize,
    /// Largest |logit − reference| over the top-20s of every fixture position.
    pub max_logit_diff: f32,
}

/// Runs every prompt of `fixture` (at most `max_prompts`) on `backend`: greedy decoding for as
/// many steps as the reference has (at most `max_steps`), and the logits at the fixture
/// positions, with a `kv_dtype` cache.
pub fn compare(
    backend: &dyn Backend,
    file: &GgufFile,
    fixture: &Fixture,
    kv_dtype: DType,
    max_prompts: usize,
    max_steps: usize,
) -> Result<Vec<PromptReport>, ModelError> {
    let cfg = SessionConfig {
        n_ctx: 128,
        ubatch: 64,
        kv_dtype,
        all_logits: false,
    };
    let mut s = Session::new(backend, file, cfg)?;
    let mut reports = vec![];
    for p in fixture.prompts.iter().take(max_prompts) {
        let steps = p.greedy.ids.len().min(max_steps);
        s.reset();
        // rows[k] predicts greedy step k (position prompt.len() - 1 + k).
        let mut rows = s.eval(&p.ids)?;
        let mut got = vec![];
        for _ in 0..steps {
            let t = argmax(&rows[rows.len() - 1]);
            got.push(t);
            // Feed the reference's token so later positions stay comparable after a divergence.
            let next = p.greedy.ids[got.len() - 1];
            rows.extend(s.eval(&[next])?);
        }
        let mut max_logit_diff = 0.0f32;
        for l in &p.logits {
            let Some(row) = (l.position + 1)
                .checked_sub(p.ids.len())
                .and_then(|k| rows.get(k))
            else {
                continue;
            };
            for (&id, &want) in l.top_ids.iter().zip(&l.top_logits) {
                max_logit_diff = max_logit_diff.max((row[id as usize] - want).abs());
            }
        }
        reports.push(PromptReport {
            name: p.name.clone(),
            comparable: p
                .greedy
                .top2_margins
                .iter()
                .take(steps)
                .position(|&m| m < NEAR_TIE)
                .unwrap_or(steps),
            agree: got
                .iter()
                .zip(&p.greedy.ids)
                .take_while(|(a, b)| a == b)
                .count(),
            steps,
            max_logit_diff,
        });
    }
    Ok(reports)
}

/// Prints each report and checks it: greedy tokens agree up to the reference's first near-tie,
/// logits within `tol`, and at least one prompt compared over `min_steps` or more.
pub fn verdict(reports: &[PromptReport], tol: f32, min_steps: usize) -> Result<(), String> {
    for r in reports {
        println!(
            "{}: {}/{} greedy tokens agree ({} before a near-tie), logits within {:.2e}",
            r.name, r.agree, r.steps, r.comparable, r.max_logit_diff
        );
        if r.agree < r.comparable {
            return Err(format!(
                "{}: greedy tokens diverge at step {}",
                r.name, r.agree
            ));
        }
        if r.max_logit_diff > tol {
            return Err(format!(
                "{}: logits differ by {} (> {tol})",
                r.name, r.max_logit_diff
            ));
        }
    }
    if !reports.iter().any(|r| r.comparable >= min_steps) {
        return Err(format!("no prompt had {min_steps} comparable greedy steps"));
    }
    Ok(())
}

/// The reference's perplexity of `ppl.txt` at one context (`perplexity`, `perplexity_ctx256`
/// of a fixture), the parts the check reads.
#[derive(Debug, Deserialize)]
pub struct PerplexityFixture {
    pub n_ctx: usize,
    pub n_tokens: usize,
    pub n_chunks: usize,
    pub ppl: f64,
}

impl PerplexityFixture {
    /// The entry `key` of fixture `json`.
    pub fn parse(json: &str, key: &str) -> Result<PerplexityFixture, String> {
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
        serde_json::from_value(v[key].clone()).map_err(|e| format!("fixture '{key}': {e}"))
    }
}

/// Scores `text` with `file` on `backend` as llama-perplexity does (f16 cache, one step per
/// chunk) at the fixture's context; `Err` unless the token and chunk counts match and the
/// perplexity is within 1% of the reference's. `Ok` holds it.
pub fn check_perplexity(
    backend: &dyn Backend,
    file: &GgufFile,
    text: &str,
    want: &PerplexityFixture,
) -> Result<f64, String> {
    let tok = crate::tokenizer::Tokenizer::from_gguf(file).map_err(|e| e.to_string())?;
    let tokens = tok.encode(text, true).map_err(|e| e.to_string())?;
    if tokens.len() != want.n_tokens {
        return Err(format!(
            "{} tokens, the reference has {}",
            tokens.len(),
            want.n_tokens
        ));
    }
    let cfg = SessionConfig {
        n_ctx: want.n_ctx,
        ubatch: want.n_ctx,
        kv_dtype: DType::F16,
        all_logits: true,
    };
    let mut s = Session::new(backend, file, cfg).map_err(|e| e.to_string())?;
    let bos = if tok.adds_bos() { tok.bos() } else { None };
    let p = crate::perplexity::perplexity(&mut s, &tokens, want.n_ctx, bos, |_, _, _| {})
        .map_err(|e| e.to_string())?;
    println!(
        "PPL = {:.4} +/- {:.5} at ctx {} (reference {})",
        p.ppl, p.ppl_err, want.n_ctx, want.ppl
    );
    if p.chunks != want.n_chunks {
        return Err(format!(
            "{} chunks, the reference has {}",
            p.chunks, want.n_chunks
        ));
    }
    match (p.ppl / want.ppl - 1.0).abs() < 0.01 {
        true => Ok(p.ppl),
        false => Err(format!("ppl {} vs reference {}", p.ppl, want.ppl)),
    }
}
