//! The generation loop: prompt in, tokens streamed out as UTF-8-safe text, with timings. Each
//! step reads back only what the sampler needs (`Sampler::readback`): the backend's argmax when
//! greedy, its top-K candidates for top-k sampling, the whole logits row otherwise.
//! [`generate_async`] is the same loop awaiting the session's reads (the browser's way).
//!
//! Greedy decoding keeps one step queued ahead ([`Ahead`]): step `t + 1` takes step `t`'s argmax
//! on the device ([`crate::session::NextToken::Argmax`]) and is queued before the host reads step `t`, so the device
//! never waits for the host's read, decision and encoding between steps (except once at each
//! span boundary of the cache, [`Session::can_feed`]). When step `t`'s token ends the
//! generation, the step queued ahead is finished and its token dropped from the cache.
//!
//! Sampling from the top-K candidates ([`Readback::TopK`]: no penalties) does the same with
//! the token drawn on the device ([`crate::session::NextToken::Sampled`]): the uniform of each step's draw is
//! taken from the sampler when the step is queued ([`Sampler::draw`]), in token order, so a
//! seed gives the stream of uniforms the host's draws took; a step dropped at the end gives its
//! uniform back (the sampler is restored), so a sampler reused for the next turn continues as
//! if nothing had been queued ahead. Every token of such a sampler, the prompt's included, is the
//! device's draw. Penalties and log-probabilities need the whole row: those steps run one at a
//! time and the host samples.

use web_time::{Duration, Instant};

use crate::ahead::Ahead;
use crate::error::ModelError;
use crate::sampler::Sampler;
use crate::session::{now, Readback, RowOut, SeqChunk, Session};
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// `max_tokens` were generated.
    Length,
    /// The callback asked to stop (a stop string, a closed connection).
    Callback,
}

/// Counts and timings of one generation, like llama.cpp's summary.
#[derive(Clone, Debug)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub generated_tokens: usize,
    pub generate_time: Duration,
    pub stop: StopReason,
    /// The generated tokens, an end-of-generation token left out. The session's cache then
    /// holds the prompt and these, less the last unless it was evaluated
    /// (`Session::n_past` says how many).
    pub tokens: Vec<u32>,
}

impl GenStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second (the first token is timed with the prompt, as llama.cpp).
    pub fn generate_tps(&self) -> f64 {
        self.generated_tokens.saturating_sub(1) as f64 / self.generate_time.as_secs_f64().max(1e-9)
    }
}

/// How many tokens of `prompt` a cache holding `kept` (a sequence's tokens, in order) need not
/// run again: their common prefix, less the prompt's last token, which must run for the logits
/// of the next.
pub fn reusable_prefix(kept: &[u32], prompt: &[u32]) -> usize {
    let common = kept.iter().zip(prompt).take_while(|(a, b)| a == b).count();
    common.min(prompt.len().saturating_sub(1))
}

/// Tokens appended to sequence 0, with the last one's output row.
fn chunk(tokens: &[u32]) -> [SeqChunk<'_>; 1] {
    [SeqChunk {
        seq: 0,
        tokens,
        output: true,
    }]
}

/// Generates up to `max_tokens` after `prompt`, calling `on_text` with each complete piece of
/// text; `on_text` returns `false` to stop. The session's cache is appended to, not reset.
pub fn generate(
    session: &mut Session,
    tokenizer: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    max_tokens: usize,
    on_text: impl FnMut(&str) -> bool,
) -> Result<GenStats, ModelError> {
    now(generate_async(
        session, tokenizer, sampler, prompt, max_tokens, on_text,
    ))
}

/// [`generate`] awaiting the session's reads.
pub async fn generate_async(
    session: &mut Session,
    tokenizer: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    max_tokens: usize,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<GenStats, ModelError> {
    check_room(session, prompt, max_tokens)?;
    let read = sampler.readback(session.candidates());
    // The backend draws (and the host reads only the drawn token and the argmax).
    let drawn = read == Readback::TopK;
    let read = if drawn { Readback::Argmax } else { read };
    let t0 = Instant::now();
    // The prompt's row is drawn from only when a token is generated (the host samples it only
    // then): no uniform is taken for none.
    let first: Vec<_> = match max_tokens {
        0 => vec![],
        _ => drawn.then(|| sampler.draw()).into_iter().collect(),
    };
    let mut row = session
        .step_drawn_async(&chunk(prompt), read, &first)
        .await?
        .remove(0);
    let mut out = Emit::new(tokenizer, prompt, t0.elapsed());
    let mut ahead = Ahead::new(0, drawn);
    while out.generated < max_tokens {
        let next = match row.sampled {
            Some(t) => t,
            None => sampler.sample_row(&row, &out.history)?,
        };
        if !out.take(next, &mut on_text) || out.generated == max_tokens {
            break;
        }
        if read != Readback::Argmax {
            row = session.step_async(&chunk(&[next]), read).await?.remove(0);
            continue;
        }
        let more = out.generated + 1 < max_tokens;
        row = ahead
            .step_async(session, Some(&mut *sampler), next, more)
            .await?;
    }
    ahead.discard_async(session, Some(sampler)).await?;
    Ok(out.finish(&mut on_text))
}

/// Generates as [`generate_async`] does, one step at a time with the whole logits row read
/// back, each token chosen by `pick(row, history)`, which also says whether the reply is
/// complete after it (a grammar's mask and state, say): nothing is queued ahead, since a step
/// needs the token the host picks. Stops at `max_tokens`, an end-of-generation token, a
/// complete reply (as [`StopReason::EndOfGeneration`]) or a callback returning `false`.
pub async fn generate_picked_async<E: From<ModelError>>(
    session: &mut Session,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    max_tokens: usize,
    mut pick: impl FnMut(&RowOut, &[u32]) -> Result<(u32, bool), E>,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<GenStats, E> {
    check_room(session, prompt, max_tokens)?;
    let t0 = Instant::now();
    let mut row = session
        .step_async(&chunk(prompt), Readback::Logits)
        .await?
        .remove(0);
    let mut out = Emit::new(tokenizer, prompt, t0.elapsed());
    while out.generated < max_tokens {
        let (next, complete) = pick(&row, &out.history)?;
        if !out.take(next, &mut on_text) {
            break;
        }
        if complete {
            out.stop = StopReason::EndOfGeneration;
            break;
        }
        if out.generated == max_tokens {
            break;
        }
        row = session
            .step_async(&chunk(&[next]), Readback::Logits)
            .await?
            .remove(0);
    }
    Ok(out.finish(&mut on_text))
}

/// Refuses an empty prompt, or one that cannot fit the context with `max_tokens` after it.
fn check_room(session: &Session, prompt: &[u32], max_tokens: usize) -> Result<(), ModelError> {
    if prompt.is_empty() {
        return Err(ModelError::BadSession("the prompt has no tokens".into()));
    }
    let need = session.n_past() + prompt.len() + max_tokens;
    if need > session.n_ctx() {
        return Err(ModelError::ContextFull {
            need,
            ctx: session.n_ctx(),
            max: session.architecture().n_ctx_train(),
        });
    }
    Ok(())
}

/// A generation's output so far: the tokens taken, their text streamed out, its timings.
struct Emit<'t> {
    tokenizer: &'t Tokenizer,
    stream: StreamDecoder<'t>,
    /// The prompt, then the tokens taken.
    history: Vec<u32>,
    prompt_len: usize,
    prompt_time: Duration,
    started: Instant,
    generated: usize,
    stop: StopReason,
}

impl<'t> Emit<'t> {
    fn new(tokenizer: &'t Tokenizer, prompt: &[u32], prompt_time: Duration) -> Emit<'t> {
        Emit {
            tokenizer,
            stream: tokenizer.stream_decoder(),
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
            prompt_time,
            started: Instant::now(),
            generated: 0,
            stop: StopReason::Length,
        }
    }

    /// Takes `next` and passes its text on; false when generation ends with it (an
    /// end-of-generation token, or `on_text` asked to stop).
    fn take(&mut self, next: u32, on_text: &mut impl FnMut(&str) -> bool) -> bool {
        self.generated += 1;
        if self.tokenizer.is_eog(next) {
            self.stop = StopReason::EndOfGeneration;
            return false;
        }
        self.history.push(next);
        let text = self.stream.push(next);
        if !text.is_empty() && !on_text(&text) {
            self.stop = StopReason::Callback;
            return false;
        }
        true
    }

    /// The statistics, after the text the decoder held back (unless `on_text` stopped it).
    fn finish(mut self, on_text: &mut impl FnMut(&str) -> bool) -> GenStats {
        let rest = self.stream.finish();
        if !rest.is_empty() && self.stop != StopReason::Callback {
            on_text(&rest);
        }
        GenStats {
            prompt_tokens: self.prompt_len,
            prompt_time: self.prompt_time,
            generated_tokens: self.generated,
            generate_time: self.started.elapsed(),
            stop: self.stop,
            tokens: self.history.split_off(self.prompt_len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::SamplerConfig;
    use crate::session::SessionConfig;
    use crate::synth::{llama_gguf, LlamaShape};
    use wgllm_core::DType;
    use wgllm_gguf::GgufFile;

    fn cpu_session(f: &GgufFile) -> Session {
        let cfg = SessionConfig {
            n_ctx: 32,
            ubatch: 4,
            ..SessionConfig::default()
        };
        Session::new(&wgllm_cpu::CpuBackend, f, cfg).unwrap()
    }

    fn tiny() -> GgufFile {
        let bytes = llama_gguf(&LlamaShape::TINY, DType::Q8_0, 3).unwrap();
        GgufFile::from_bytes(bytes::Bytes::from(bytes)).unwrap()
    }

    /// On the CPU backend, a generation whose tokens are drawn on the backend, one step queued
    /// ahead, gives the tokens of the host sampling each step's candidates, and leaves the
    /// sampler where the host's is.
    #[test]
    fn drawn_tokens_are_the_hosts_on_the_cpu_backend() {
        const N: usize = 6;
        let f = tiny();
        let (mut s, tokenizer) = (cpu_session(&f), Tokenizer::from_gguf(&f).unwrap());
        let cfg = SamplerConfig {
            temperature: 1.5,
            seed: 7,
            ..SamplerConfig::default()
        };
        let mut host = Sampler::new(cfg);
        let mut row = s
            .step(&chunk(&[1, 5, 9]), Readback::TopK)
            .unwrap()
            .remove(0);
        let mut want = vec![];
        for _ in 0..N {
            want.push(host.sample_row(&row, &[]).unwrap());
            row = s
                .step(&chunk(&want[want.len() - 1..]), Readback::TopK)
                .unwrap()
                .remove(0);
        }
        assert!(
            !want.iter().any(|&t| tokenizer.is_eog(t)),
            "{want:?} ends early"
        );
        s.reset();
        let mut device = Sampler::new(cfg);
        let mut text = String::new();
        let stats = generate(&mut s, &tokenizer, &mut device, &[1, 5, 9], N, |t| {
            text.push_str(t);
            true
        })
        .unwrap();
        assert_eq!(stats.generated_tokens, N);
        assert_eq!(text, tokenizer.decode(&want));
        assert_eq!(s.n_past(), 3 + N - 1);
        assert_eq!(device.draw(), host.draw());
    }

    /// A generation of no tokens evaluates the prompt but draws nothing: the sampler's stream
    /// continues where it was, as the host's sampler (which samples no row) leaves it.
    #[test]
    fn no_tokens_take_no_uniform() {
        let f = tiny();
        let mut s = cpu_session(&f);
        let tokenizer = Tokenizer::from_gguf(&f).unwrap();
        let mut sampler = Sampler::new(SamplerConfig::default());
        assert_eq!(sampler.readback(s.candidates()), Readback::TopK);
        let fresh = sampler.clone();
        let stats = generate(&mut s, &tokenizer, &mut sampler, &[1, 5, 9], 0, |_| true).unwrap();
        assert_eq!(stats.generated_tokens, 0);
        assert_eq!(s.n_past(), 3);
        assert_eq!(sampler.draw(), fresh.clone().draw());
    }
}
