//! Generation held to a grammar (a JSON schema, any JSON object, GBNF): every step reads the
//! whole logits row back and the grammar's mask picks the token, as the server does for a
//! constrained request.

use wgllm_models::generate::{generate_picked_async, GenStats};
use wgllm_models::sampler::Sampler;
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::Session;
use wgllm_structured::Constraint;

use crate::error::WebError;

/// Generates up to `max_tokens` after `prompt` under `constraint`, calling `on_text` with each
/// piece (`false` stops). Ends when the grammar is complete (as `EndOfGeneration`), at an
/// end-of-generation token the grammar allows, or at `max_tokens`.
pub async fn generate_constrained(
    session: &mut Session,
    tokenizer: &Tokenizer,
    sampler: &mut Sampler,
    constraint: &mut Constraint,
    prompt: &[u32],
    max_tokens: usize,
    on_text: impl FnMut(&str) -> bool,
) -> Result<GenStats, WebError> {
    let pick = |row: &wgllm_models::RowOut, history: &[u32]| -> Result<(u32, bool), WebError> {
        let logits = row
            .logits
            .as_deref()
            .ok_or_else(|| WebError::Stream("a constrained step read back no logits".into()))?;
        let next = constraint.pick(sampler, logits, history)?;
        Ok((next, constraint.accept(next)?))
    };
    generate_picked_async(session, tokenizer, prompt, max_tokens, pick, on_text).await
}
