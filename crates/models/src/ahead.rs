//! One sequence decoded with its next step queued on the device ahead of the one being read: the
//! decode loop of generation ([`crate::generate`]), of the server's lone decoding slot and of
//! `wgllm bench`, written once.
//!
//! The step queued ahead takes its token on the device (the argmax, or the token its
//! predecessor drew), so the device never waits for the host between two tokens. The first step
//! past a span boundary of the cache runs another graph and takes its token from the host
//! ([`Session::can_feed`]).

use crate::sampler::Sampler;
use crate::session::{NextToken, QueuedStep, Readback, RowOut, Session};
use crate::ModelError;

/// The decode steps of one sequence, at most one queued ahead.
pub struct Ahead {
    seq: usize,
    /// The rows draw their token on the device (top-k sampling), else the argmax is fed on.
    drawn: bool,
    /// The step queued ahead (it evaluates the token of the last row read), and the sampler as
    /// it was before that step's draw.
    queued: Option<(QueuedStep, Option<Sampler>)>,
}

impl Ahead {
    /// Decoding of sequence `seq`; `drawn`: the sampler draws on the device
    /// ([`Readback::TopK`]), whose draws every step then takes from it.
    pub fn new(seq: usize, drawn: bool) -> Ahead {
        Ahead {
            seq,
            drawn,
            queued: None,
        }
    }

    /// The sequence decoded.
    pub fn seq(&self) -> usize {
        self.seq
    }

    /// Whether a step is queued ahead.
    pub fn is_queued(&self) -> bool {
        self.queued.is_some()
    }

    /// The row of the step that evaluates `next` (the step queued ahead when there is one: it
    /// was fed `next` on the device). With `more` (another token may follow), the step after
    /// it is queued before this one is read, where the cache lets it take its token there.
    pub fn step(
        &mut self,
        session: &mut Session,
        sampler: Option<&mut Sampler>,
        next: u32,
        more: bool,
    ) -> Result<RowOut, ModelError> {
        crate::session::now(self.step_async(session, sampler, next, more))
    }

    /// [`Ahead::step`] awaiting the backend's read: the browser's way.
    pub async fn step_async(
        &mut self,
        session: &mut Session,
        mut sampler: Option<&mut Sampler>,
        next: u32,
        more: bool,
    ) -> Result<RowOut, ModelError> {
        let drawn = self.drawn;
        let draw = |s: &mut Option<&mut Sampler>| match (drawn, s) {
            (true, Some(s)) => Some(s.draw()),
            _ => None,
        };
        let current = match self.queued.take() {
            Some((q, _)) => q,
            None => {
                let d = draw(&mut sampler);
                session.queue_decode(self.seq, NextToken::Id(next), Readback::Argmax, d)?
            }
        };
        if more && session.can_feed(self.seq) {
            let before = sampler.as_deref().cloned();
            let d = draw(&mut sampler);
            let feed = match d.is_some() {
                true => NextToken::Sampled,
                false => NextToken::Argmax,
            };
            match session.queue_decode(self.seq, feed, Readback::Argmax, d) {
                Ok(q) => self.queued = Some((q, before)),
                Err(e) => {
                    // The current step is still the device's: finish it before failing.
                    let _ = session.finish_decode_async(current).await;
                    return Err(e);
                }
            }
        }
        session.finish_decode_async(current).await
    }

    /// The row of the step queued ahead, if any: it is the sequence's real next step (decoding
    /// goes on elsewhere, in a batched step, say).
    pub fn settle(&mut self, session: &mut Session) -> Option<Result<RowOut, ModelError>> {
        let (q, _) = self.queued.take()?;
        Some(session.finish_decode(q))
    }

    /// [`Ahead::discard_async`] for backends whose reads are ready at once.
    pub fn discard(
        &mut self,
        session: &mut Session,
        sampler: Option<&mut Sampler>,
    ) -> Result<(), ModelError> {
        crate::session::now(self.discard_async(session, sampler))
    }

    /// Drops the step queued ahead, if any, whose token will not be taken (generation ended):
    /// it is finished, its position removed from the sequence, and `sampler` put back as it was
    /// before that step's draw. When that step failed the sequence's cache is not to be
    /// trusted, and is cleared.
    pub async fn discard_async(
        &mut self,
        session: &mut Session,
        sampler: Option<&mut Sampler>,
    ) -> Result<(), ModelError> {
        let Some((q, before)) = self.queued.take() else {
            return Ok(());
        };
        if let Err(e) = session.finish_decode_async(q).await {
            session.clear_seq(self.seq);
            return Err(e);
        }
        let n = session.seq_len(self.seq);
        session.truncate_seq(self.seq, n.saturating_sub(1));
        if let (Some(s), Some(b)) = (sampler, before) {
            *s = b;
        }
        Ok(())
    }
}
