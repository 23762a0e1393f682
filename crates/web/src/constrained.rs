//! Generation held to a grammar (a JSON schema, any JSON object, GBNF): every step reads the
//! whole logits row back and the grammar's mask picks the token, as the server does for a
//! constrained request. One sequence, so nothing is queued ahead: the next step needs the
//! token the mask allows.

use web_time::Instant;
use wgllm_models::generate::{GenStats, StopReason};
use wgllm_models::sampler::Sampler;
use wgllm_models::session::{Readback, SeqChunk};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{ModelError, Session};
use wgllm_structured::Constraint;

use crate::engine::WebError;

fn one(tokens: &[u32]) -> [SeqChunk<'_>; 1] {
    [SeqChunk {
        seq: 0,
        tokens,
        output: true,
    }]
}

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
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<GenStats, WebError> {
    if prompt.is_empty() {
        return Err(ModelError::BadSession("the prompt has no tokens".into()).into());
    }
    let need = session.n_past() + prompt.len() + max_tokens;
    if need > session.n_ctx() {
        return Err(ModelError::ContextFull {
            need,
            ctx: session.n_ctx(),
            max: session.architecture().n_ctx_train(),
        }
        .into());
    }
    let t0 = Instant::now();
    let mut row = session
        .step_async(&one(prompt), Readback::Logits)
        .await?
        .remove(0);
    let prompt_time = t0.elapsed();
    let t1 = Instant::now();
    let mut history = prompt.to_vec();
    let mut stream = tokenizer.stream_decoder();
    let (mut generated, mut stop) = (0, StopReason::Length);
    while generated < max_tokens {
        let logits = row
            .logits
            .as_deref()
            .ok_or_else(|| WebError::Stream("a constrained step read back no logits".into()))?;
        let next = constraint.pick(sampler, logits, &history)?;
        let complete = constraint.accept(next)?;
        generated += 1;
        if tokenizer.is_eog(next) {
            stop = StopReason::EndOfGeneration;
            break;
        }
        history.push(next);
        let text = stream.push(next);
        if !text.is_empty() && !on_text(&text) {
            stop = StopReason::Callback;
            break;
        }
        if complete {
            stop = StopReason::EndOfGeneration;
            break;
        }
        if generated == max_tokens {
            break;
        }
        row = session
            .step_async(&one(&[next]), Readback::Logits)
            .await?
            .remove(0);
    }
    let rest = stream.finish();
    if !rest.is_empty() && stop != StopReason::Callback {
        on_text(&rest);
    }
    Ok(GenStats {
        prompt_tokens: prompt.len(),
        prompt_time,
        generated_tokens: generated,
        generate_time: t1.elapsed(),
        stop,
        tokens: history.split_off(prompt.len()),
    })
}
