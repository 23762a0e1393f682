//! Perplexity by llama-perplexity's method: the text is cut into non-overlapping chunks of
//! `n_ctx` tokens, each evaluated from an empty cache (its first token replaced by BOS where the
//! model adds BOS), and only the second half of each chunk is scored.

use crate::error::ModelError;
use crate::session::Session;

/// Result of a perplexity run.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    pub ppl: f64,
    /// llama.cpp's uncertainty: `sqrt(var(nll) / (count - 1)) · ppl`.
    pub ppl_err: f64,
    pub chunks: usize,
    /// Scored tokens.
    pub count: usize,
    /// Mean negative log-likelihood of each chunk.
    pub chunk_nll: Vec<f64>,
}

/// Scores `tokens` in chunks of `n_ctx`; `session` must have been made with `all_logits` and a
/// context of at least `n_ctx`. `bos` replaces each chunk's first token when given.
pub fn perplexity(
    session: &mut Session,
    tokens: &[u32],
    n_ctx: usize,
    bos: Option<u32>,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    if n_ctx < 2 || tokens.len() < n_ctx {
        return Err(ModelError::BadMetadata {
            key: "perplexity".into(),
            value: format!("{} tokens", tokens.len()),
            why: format!(
                "need at least one chunk of {n_ctx} tokens (use a longer text or a smaller -c)"
            ),
        });
    }
    let n_chunks = tokens.len() / n_ctx;
    let first = n_ctx / 2;
    let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
    let mut chunk_nll = Vec::with_capacity(n_chunks);
    for c in 0..n_chunks {
        let mut chunk = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        session.reset();
        let logits = session.eval(&chunk)?;
        let mut sum = 0.0;
        for j in first..n_ctx - 1 {
            let row = &logits[j];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = max
                + row
                    .iter()
                    .map(|&v| (v as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            let target = tokens[c * n_ctx + j + 1] as usize;
            let v = lse - row[target] as f64;
            sum += v;
            nll += v;
            nll2 += v * v;
            count += 1;
        }
        chunk_nll.push(sum / (n_ctx - 1 - first) as f64);
        progress(c + 1, n_chunks, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = nll2 / count as f64 - mean * mean;
    let ppl_err = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        ppl_err,
        chunks: n_chunks,
        count,
        chunk_nll,
    })
}
