//! The scheduler: one thread owns the `Session` (the model and its KV cache of `--parallel`
//! sequences) and runs continuous batching. Each step it
//! 1. lets go of requests whose client went away (their event channel is closed),
//! 2. takes waiting requests into free slots (blocking only when every slot is idle),
//! 3. runs ONE `Session::step` carrying the next token of every decoding slot plus, within the
//!    step's token budget (`ubatch`), chunks of the prompts of newly admitted slots, oldest first,
//! 4. samples each output row with its request's sampler and sends the text to the request's
//!    handler, ending requests at an end-of-generation token, a stop string or `max_tokens`.
//!
//! So a new request joins between steps (its prompt prefilled in chunks alongside the others'
//! decoding) and a finished or abandoned one leaves at the next step.
//!
//! Prompt cache (with `prompt_cache`, as llama-server's `cache_prompt`): a slot keeps its
//! request's tokens in the KV cache when it is freed. A new request takes the free slot whose
//! kept tokens share more with its prompt than taking the slot would throw away, the most such
//! (else the slot throwing away the fewest, the least recently freed on a tie), and prefills
//! only the rest, so a conversation's next turn, which repeats the whole history,
//! costs only its new tokens. At least the prompt's last token is always run: its logits give
//! the first generated token. `Usage::cached_tokens` says how many were reused. Requests wait in a bounded
//! queue; when it is full, [`Engine::submit`] refuses (503) instead of queueing without bound.
//!
//! A lone client decodes one step queued ahead (with `queue_ahead`): while exactly one slot is
//! busy, its prompt done, and its request samples greedily or from the top-K candidates without
//! penalties or log-probabilities, step `t + 1` is queued on the device before the host reads
//! step `t`, its token fed there from step `t`'s argmax or the token drawn on the device
//! (`Session::queue_decode`), as `wgllm_models::generate` decodes. The token of the step queued
//! ahead is the request's real next token: when another request arrives that step is finished
//! and its token taken as usual, then steps are batched again; when the request ends (an
//! end-of-generation token, a stop string, its client gone) the step is finished and its token
//! dropped from the slot's cache. A step queued ahead is never queued past `max_tokens`. The
//! sampler's uniform for that dropped token is not given back: the request, and its sampler,
//! end with it.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use wgllm_models::ahead::Ahead;
use wgllm_models::generate::reusable_prefix;
use wgllm_models::sampler::Sampler;
use wgllm_models::tokenizer::{StreamDecoder, Tokenizer};
use wgllm_models::{Readback, RowOut, SeqChunk, Session};

use crate::api::GenParams;
use crate::error::ApiError;
use crate::metrics::Metrics;
use wgllm_models::stop::StopMatcher;
use wgllm_structured::Constraint;

/// A request handed to the scheduler.
pub struct Job {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    /// The grammar the output follows: each step reads the whole logits row, masks it, and
    /// the mask of the next token is computed on the host while the device runs the step.
    pub constraint: Option<Constraint>,
    /// Where the request's events go; closed when the client is gone.
    pub events: UnboundedSender<Event>,
}

/// What the scheduler tells a request's handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// New text (possibly empty when only log-probabilities come), with the log-probabilities
    /// of the tokens that made it when the request asked for them.
    Text {
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    /// The end, with the counts.
    Done { finish: Finish, usage: Usage },
    /// The request cannot go on: generation failed on the backend (500), or the server is
    /// shutting down (503).
    Failed(ApiError),
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The reply calls tools (decided when the reply is parsed, never by the scheduler).
    ToolCalls,
}

impl Finish {
    /// OpenAI's `finish_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        }
    }
}

/// Token counts of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV rows were kept from the slot's earlier request.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

/// A generated token's log-probability, with the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// Waiting requests and free slots, under one lock.
struct QueueState {
    /// Waiting requests, with when each arrived.
    jobs: VecDeque<(Job, Instant)>,
    /// Slots holding no request.
    free_slots: usize,
    closed: bool,
    /// Why the scheduler stopped, when it panicked, its device was lost or a step hung.
    failed: Option<String>,
    /// When the step on the device began, while one runs (the watchdog's clock).
    busy_since: Option<Instant>,
}

struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// Requests that may wait while no slot is free.
    capacity: usize,
    /// Says why once the scheduler has failed: the handlers waiting on it answer at once,
    /// even when its thread is stuck in a step and cannot tell them.
    stopped: tokio::sync::watch::Sender<Option<String>>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // A panic elsewhere cannot leave the queue inconsistent (every change is one statement).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the scheduler failed for `why` (the first reason stays) and wakes every waiter.
    fn fail(&self, why: String) {
        let mut s = self.lock();
        if s.failed.is_none() {
            tracing::error!("{why}: every request fails and /health answers 503");
            s.failed = Some(why.clone());
            self.stopped.send_replace(Some(why));
        }
        drop(s);
        self.ready.notify_all();
    }

    /// Drops waiting jobs whose client has gone: they hold no place in the queue.
    fn prune(s: &mut QueueState, metrics: &Metrics) {
        let before = s.jobs.len();
        s.jobs.retain(|(j, _)| !j.events.is_closed());
        let gone = before - s.jobs.len();
        metrics.cancelled.fetch_add(gone as u64, Ordering::Relaxed);
    }
}

/// The handle the HTTP side holds: submit requests, read metrics. [`Engine::close`] (and
/// dropping it, which then waits for the thread) stops the scheduler after the step in flight.
pub struct Engine {
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    thread: Option<JoinHandle<()>>,
}

/// How the scheduler runs.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Requests that may wait while every slot is busy.
    pub queue: usize,
    /// Most tokens a step carries (at least one per slot).
    pub ubatch: usize,
    /// A lone decoding slot keeps one step queued ahead on the device (see the module's notes).
    pub queue_ahead: bool,
    /// Freed slots keep their tokens for a later prompt sharing a prefix (see the module's
    /// notes).
    pub prompt_cache: bool,
    /// A step running longer than this means a hung device: every request fails and `/health`
    /// turns 503.
    pub step_timeout: std::time::Duration,
}

impl Engine {
    /// Starts the scheduler thread, which builds its `Session` with `load` (backends and
    /// sessions stay on the thread that made them) and gives one slot to each sequence. Returns
    /// once the session is built, or with its error.
    pub fn start(
        load: Box<dyn FnOnce() -> anyhow::Result<Session> + Send>,
        tokenizer: Arc<Tokenizer>,
        opts: EngineOptions,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Engine> {
        let queue = opts.queue;
        let q = Arc::new(Queue {
            state: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                free_slots: 0,
                closed: false,
                failed: None,
                busy_since: None,
            }),
            ready: Condvar::new(),
            capacity: queue,
            stopped: tokio::sync::watch::channel(None).0,
        });
        let (q2, m2) = (q.clone(), metrics.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("wgllm-scheduler".into())
            .spawn(move || {
                let session = match load() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let slots = session.n_seq();
                q2.lock().free_slots = slots;
                m2.slots_total.store(slots as u64, Ordering::Relaxed);
                let _ = ready_tx.send(Ok(()));
                let mut sched = Scheduler::new(session, &tokenizer, q2, m2, opts);
                // A panic (a bug, a backend fault) must not leave requests waiting forever:
                // every one held or queued fails with a 500, and later ones are refused.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sched.run()));
                if let Err(p) = run {
                    let why = format!("the scheduler stopped: {}", panic_message(&*p));
                    sched.queue.fail(why.clone());
                    sched.end_all(|| ApiError::internal(why.clone()));
                }
            })?;
        let watched = Arc::downgrade(&q);
        std::thread::Builder::new()
            .name("wgllm-watchdog".into())
            .spawn(move || watchdog(watched, opts.step_timeout))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Engine {
                queue: q,
                metrics,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(anyhow::anyhow!(
                "the scheduler thread died while loading the model"
            )),
        }
    }

    /// Whether the scheduler thread is running (and has not panicked).
    pub fn is_alive(&self) -> bool {
        self.why_stopped().is_none()
    }

    /// Why the scheduler no longer runs; `None` while it does.
    pub fn why_stopped(&self) -> Option<String> {
        if let Some(why) = &self.queue.lock().failed {
            return Some(why.clone());
        }
        match self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            true => None,
            false => Some("the scheduler has stopped".into()),
        }
    }

    /// Completes with the reason once the scheduler has failed (a panic, a lost device, a hung
    /// step); pending while it runs.
    pub fn failed(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut rx = self.queue.stopped.subscribe();
        async move {
            let why = rx
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|why| why.clone());
            match why {
                Some(why) => why,
                // The engine is gone: it cannot fail any more.
                None => std::future::pending().await,
            }
        }
    }

    /// Queues `job`, or refuses with 503 when every slot is busy and the queue is full.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        let mut s = self.queue.lock();
        Queue::prune(&mut s, &self.metrics);
        if s.closed {
            return Err(ApiError::shutting_down());
        }
        // Checked under the lock that pushes: a panicking scheduler sets `failed` before it
        // drains the queue, so no job is left behind unanswered.
        if let Some(why) = &s.failed {
            return Err(ApiError::internal(why.clone()));
        }
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            return Err(ApiError::internal("the scheduler has stopped"));
        }
        if s.jobs.len() >= self.queue.capacity + s.free_slots {
            Metrics::inc(&self.metrics.rejected_busy);
            return Err(ApiError::overloaded(s.jobs.len()));
        }
        s.jobs.push_back((job, Instant::now()));
        Metrics::inc(&self.metrics.requests);
        self.metrics
            .queue_depth
            .store(s.jobs.len() as u64, Ordering::Relaxed);
        self.queue.ready.notify_one();
        Ok(())
    }

    /// The counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Stops the scheduler after the step in flight: every request it holds, in a slot or
    /// waiting, ends with a 503 saying the server is shutting down, and new ones are refused.
    pub fn close(&self) {
        self.queue.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.close();
        // A failed scheduler's thread may be stuck in a hung step: it is left behind.
        let failed = self.queue.lock().failed.is_some();
        if let (Some(t), false) = (self.thread.take(), failed) {
            let _ = t.join();
        }
    }
}

/// Fails the scheduler of `queue` when a step has run past `limit`; ends with the engine.
fn watchdog(queue: std::sync::Weak<Queue>, limit: std::time::Duration) {
    let tick = (limit / 4).clamp(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_secs(1),
    );
    loop {
        std::thread::sleep(tick);
        let Some(q) = queue.upgrade() else { return };
        let s = q.lock();
        if s.closed || s.failed.is_some() {
            return;
        }
        let hung = s.busy_since.is_some_and(|t| t.elapsed() > limit);
        drop(s);
        if hung {
            q.fail(format!(
                "a step on the device has run for more than {:.0} s: the device is hung or lost (--step-timeout)",
                limit.as_secs_f64()
            ));
            return;
        }
    }
}

/// A request in a slot.
struct Slot<'t> {
    job: Job,
    /// When the request arrived, and when it last had a token.
    arrived: Instant,
    last_token: Option<Instant>,
    /// Admission order (prompts are prefilled oldest first).
    order: u64,
    /// Prompt tokens already in the cache.
    prefilled: usize,
    /// Prompt tokens kept in the cache from the slot's earlier request.
    cached: usize,
    /// The sampled token the next step feeds.
    next: Option<u32>,
    /// Prompt and generated tokens (the penalties' window).
    history: Vec<u32>,
    generated: usize,
    sampler: Sampler,
    decoder: StreamDecoder<'t>,
    stops: StopMatcher,
}

struct Scheduler<'t> {
    session: Session,
    tok: &'t Tokenizer,
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    slots: Vec<Option<Slot<'t>>>,
    /// The tokens each free slot's sequence holds in the KV cache (empty without the prompt
    /// cache), and when it was last freed (`freed` counts the frees).
    kept: Vec<Vec<u32>>,
    last_used: Vec<u64>,
    freed: u64,
    budget: usize,
    admitted: u64,
    /// Whether a lone decoding slot may keep a step queued ahead.
    queue_ahead: bool,
    prompt_cache: bool,
    /// The lone decoding slot's step queued ahead, while there is one.
    ahead: Option<Ahead>,
    /// Threads a step's grammar masks spread over: the cores beside the scheduler's own.
    mask_threads: usize,
}

impl<'t> Scheduler<'t> {
    fn new(
        session: Session,
        tok: &'t Tokenizer,
        queue: Arc<Queue>,
        metrics: Arc<Metrics>,
        opts: EngineOptions,
    ) -> Scheduler<'t> {
        let n = session.n_seq();
        Scheduler {
            session,
            tok,
            queue,
            metrics,
            slots: (0..n).map(|_| None).collect(),
            kept: vec![Vec::new(); n],
            last_used: vec![0; n],
            freed: 0,
            budget: opts.ubatch.max(n),
            admitted: 0,
            queue_ahead: opts.queue_ahead,
            prompt_cache: opts.prompt_cache,
            ahead: None,
            mask_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1).max(1)),
        }
    }

    fn run(&mut self) {
        loop {
            // Closed (the server is shutting down): generating on to `max_tokens` would hold
            // the shutdown up for as long.
            let (closed, failed) = {
                let q = self.queue.lock();
                (q.closed, q.failed.clone())
            };
            if closed {
                self.end_all(ApiError::shutting_down);
                self.drop_ahead();
                return;
            }
            // Failed while a step ran too long (the watchdog): whatever it was is not to be
            // trusted, and the requests have been answered.
            if let Some(why) = failed {
                self.end_all(|| ApiError::internal(why.clone()));
                self.drop_ahead();
                return;
            }
            self.drop_cancelled();
            if !self.admit() {
                return;
            }
            self.queue.lock().busy_since = Some(Instant::now());
            if let Some(i) = self.lone_decoder() {
                self.step_ahead(i);
            } else {
                self.settle_ahead();
                if self.slots.iter().any(Option::is_some) {
                    self.step();
                }
            }
            self.queue.lock().busy_since = None;
        }
    }

    /// Frees slot `i`, dropping the step queued ahead for it.
    fn free(&mut self, i: usize) {
        let Some(s) = self.slots[i].take() else {
            return;
        };
        self.queue.lock().free_slots += 1;
        self.metrics.slots_busy.fetch_sub(1, Ordering::Relaxed);
        let sound = match self.ahead.as_ref().is_some_and(|a| a.seq() == i) {
            true => self.drop_ahead(),
            false => true,
        };
        self.freed += 1;
        self.last_used[i] = self.freed;
        self.kept[i].clear();
        // The cache holds the prompt's prefilled part, then each generated token once a step
        // has fed it: the history's first `seq_len` tokens.
        if self.prompt_cache && sound {
            let mut kept = s.history;
            kept.truncate(self.session.seq_len(i));
            self.kept[i] = kept;
        }
    }

    /// Tells slot `i`'s client that generation failed (`why`), and frees the slot.
    fn fail(&mut self, i: usize, why: &dyn std::fmt::Display) {
        tracing::warn!(slot = i, "generation failed on the backend: {why}");
        if let Some(s) = &self.slots[i] {
            let _ = s
                .job
                .events
                .send(Event::Failed(ApiError::internal(why.to_string())));
            Metrics::inc(&self.metrics.failed);
        }
        self.free(i);
        // What a failed step left in the cache is not to be trusted.
        self.kept[i].clear();
        self.session.clear_seq(i);
    }

    /// Ends every request held, in a slot or waiting, with the error `why` makes.
    fn end_all(&mut self, why: impl Fn() -> ApiError) {
        let waiting = std::mem::take(&mut self.queue.lock().jobs);
        self.metrics.queue_depth.store(0, Ordering::Relaxed);
        let held = self.slots.iter_mut().filter_map(Option::take);
        for job in held
            .map(|s| s.job)
            .chain(waiting.into_iter().map(|(j, _)| j))
        {
            let _ = job.events.send(Event::Failed(why()));
        }
        self.metrics.slots_busy.store(0, Ordering::Relaxed);
    }

    /// The slot to decode with a step queued ahead: the only busy one, when it is decoding and
    /// its request's next token can be taken on the device. `admit` has just run, so no request
    /// waits that a free slot could take (with one slot, one that waits cannot start before this
    /// one ends anyway).
    fn lone_decoder(&self) -> Option<usize> {
        if !self.queue_ahead {
            return None;
        }
        let mut busy = self.slots.iter().enumerate().filter(|(_, s)| s.is_some());
        let (i, s) = busy.next()?;
        let s = s.as_ref()?;
        let read = s.sampler.readback(self.session.candidates());
        let lone = busy.next().is_none();
        let plain =
            s.job.params.logprobs.is_none() && s.job.constraint.is_none() && read <= Readback::TopK;
        (lone && plain && s.next.is_some()).then_some(i)
    }

    /// One decode step of slot `i`, the only busy one, with the next step queued ahead on the
    /// device before this one is read (when another token may follow).
    fn step_ahead(&mut self, i: usize) {
        let cands = self.session.candidates();
        let s = self.slots[i].as_mut().expect("the lone decoder is busy");
        // Top-K sampling draws on the device; greedy decoding takes the argmax.
        let drawn = s.sampler.readback(cands) == Readback::TopK;
        let next = s.next.expect("the lone decoder is decoding");
        let t0 = Instant::now();
        let mut ahead = self.ahead.take().unwrap_or_else(|| Ahead::new(i, drawn));
        // `generated` counts `next`: the step after this one is wanted when the token this
        // one gives is not the last that `max_tokens` allows.
        let more = s.generated + 1 < s.job.params.max_tokens;
        let row = ahead.step(&mut self.session, Some(&mut s.sampler), next, more);
        if ahead.is_queued() {
            self.ahead = Some(ahead);
        }
        match row {
            Ok(row) => {
                self.metrics.step(1, t0.elapsed().as_secs_f64());
                Metrics::inc(&self.metrics.steps_ahead);
                self.accept(i, &row);
            }
            Err(e) => self.fail(i, &e),
        }
    }

    /// Finishes the step queued ahead, if any, and takes its token: steps are batched again.
    fn settle_ahead(&mut self) {
        let Some(mut a) = self.ahead.take() else {
            return;
        };
        let t0 = Instant::now();
        match a.settle(&mut self.session) {
            Some(Ok(row)) => {
                self.metrics.step(1, t0.elapsed().as_secs_f64());
                Metrics::inc(&self.metrics.steps_ahead);
                self.accept(a.seq(), &row);
            }
            Some(Err(e)) => self.fail(a.seq(), &e),
            None => {}
        }
    }

    /// Finishes the step queued ahead, if any, whose request has ended, and drops its token
    /// from the slot's cache.
    /// False when that step failed: the slot's cache is not to be trusted (and is cleared).
    fn drop_ahead(&mut self) -> bool {
        // Its row is not wanted, and an error there has no request left to tell: the next step
        // meets a broken backend again.
        match self.ahead.take() {
            Some(mut a) => a.discard(&mut self.session, None).is_ok(),
            None => true,
        }
    }

    fn drop_cancelled(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i]
                .as_ref()
                .is_some_and(|s| s.job.events.is_closed())
            {
                Metrics::inc(&self.metrics.cancelled);
                self.free(i);
            }
        }
    }

    /// Moves waiting requests into free slots, waiting for one when all slots are idle. False
    /// when the engine is closed and nothing is left to do.
    fn admit(&mut self) -> bool {
        let idle = self.slots.iter().all(Option::is_none);
        let mut q = self.queue.lock();
        Queue::prune(&mut q, &self.metrics);
        while idle && q.jobs.is_empty() {
            if q.closed {
                return false;
            }
            q = self.queue.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            Queue::prune(&mut q, &self.metrics);
        }
        while let Some((job, _)) = q.jobs.front() {
            // The free slot where the prompt reuses more tokens than it throws away, the most
            // such; else the one that throws away the fewest (an empty one first), the least
            // recently used on a tie: a new conversation sharing only a system prompt with a
            // long one takes another slot rather than cut that one short.
            let Some((reuse, i)) = (0..self.slots.len())
                .filter(|&i| self.slots[i].is_none())
                .map(|i| (self.reusable(i, &job.prompt), i))
                .max_by_key(|&((reuse, lost), i)| {
                    let gain = reuse.saturating_sub(lost);
                    (gain, Reverse(lost), Reverse(self.last_used[i]))
                })
                .map(|((reuse, _), i)| (reuse, i))
            else {
                break;
            };
            let (job, arrived) = q.jobs.pop_front().expect("a job is waiting");
            self.metrics
                .latency
                .queue_time
                .observe(arrived.elapsed().as_secs_f64());
            q.free_slots -= 1;
            self.session.truncate_seq(i, reuse);
            self.kept[i] = Vec::new();
            self.admitted += 1;
            self.metrics
                .prompt_tokens
                .fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
            self.metrics
                .prompt_tokens_cached
                .fetch_add(reuse as u64, Ordering::Relaxed);
            Metrics::inc(&self.metrics.slots_busy);
            self.slots[i] = Some(Slot {
                arrived,
                last_token: None,
                order: self.admitted,
                prefilled: reuse,
                cached: reuse,
                next: None,
                history: job.prompt.clone(),
                generated: 0,
                sampler: Sampler::new(job.params.sampler),
                decoder: self.tok.stream_decoder(),
                stops: StopMatcher::new(job.params.stop.clone()),
                job,
            });
        }
        self.metrics
            .queue_depth
            .store(q.jobs.len() as u64, Ordering::Relaxed);
        true
    }

    /// Tokens of `prompt` free slot `i` holds in its cache already (their common prefix, less
    /// the prompt's last token, which must run for its logits), and the slot's tokens past
    /// them, which taking it would throw away.
    fn reusable(&self, i: usize, prompt: &[u32]) -> (usize, usize) {
        let reuse = reusable_prefix(&self.kept[i], prompt);
        (reuse, self.kept[i].len() - reuse)
    }

    /// One batched step over every busy slot.
    fn step(&mut self) {
        let cands = self.session.candidates();
        let mut budget = self.budget;
        // (slot, first prompt token, end) for prefill chunks; the next token for decoding slots.
        let mut decode: Vec<(usize, [u32; 1])> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(t) = s.as_ref().and_then(|s| s.next) {
                decode.push((i, [t]));
            }
        }
        budget = budget.saturating_sub(decode.len());
        let mut waiting: Vec<(u64, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref()
                    .filter(|s| s.prefilled < s.job.prompt.len())
                    .map(|s| (s.order, i))
            })
            .collect();
        waiting.sort_unstable();
        let mut prefill: Vec<(usize, usize, usize)> = Vec::new();
        for (_, i) in waiting {
            if budget == 0 {
                break;
            }
            let s = self.slots[i].as_ref().expect("waiting slots are busy");
            let end = s.job.prompt.len().min(s.prefilled + budget);
            budget -= end - s.prefilled;
            prefill.push((i, s.prefilled, end));
        }
        let slot = |i: usize| self.slots[i].as_ref().expect("batched slots are busy");
        let mut outputs: Vec<usize> = decode.iter().map(|d| d.0).collect();
        outputs.extend(
            prefill
                .iter()
                .filter(|p| p.2 == slot(p.0).job.prompt.len())
                .map(|p| p.0),
        );
        let read = outputs
            .iter()
            .map(|&i| {
                let s = slot(i);
                if s.job.params.logprobs.is_some() || s.job.constraint.is_some() {
                    Readback::Logits
                } else {
                    s.sampler.readback(cands)
                }
            })
            .max()
            .unwrap_or(Readback::Argmax);
        // The constraints of this step's output rows, their masks computed beside the step.
        let mut masks: Vec<(usize, Constraint)> = outputs
            .iter()
            .filter_map(|&i| {
                let s = self.slots[i].as_mut()?;
                Some((i, s.job.constraint.take()?))
            })
            .collect();
        let slot = |i: usize| self.slots[i].as_ref().expect("batched slots are busy");
        let chunks: Vec<SeqChunk<'_>> = decode
            .iter()
            .map(|(i, t)| SeqChunk {
                seq: *i,
                tokens: t,
                output: true,
            })
            .chain(prefill.iter().map(|&(i, a, b)| {
                let prompt = &slot(i).job.prompt;
                SeqChunk {
                    seq: i,
                    tokens: &prompt[a..b],
                    output: b == prompt.len(),
                }
            }))
            .collect();
        let t0 = Instant::now();
        let session = &mut self.session;
        let result = std::thread::scope(|sc| {
            // The rows' masks are independent: spread over the cores, the step waits for the
            // slowest mask rather than for their sum.
            let per = masks.len().div_ceil(self.mask_threads).max(1);
            let hosts: Vec<_> = masks
                .chunks_mut(per)
                .map(|part| {
                    sc.spawn(move || {
                        // An error here comes back from `apply`, which computes again.
                        for (_, c) in part {
                            let _ = c.prepare();
                        }
                    })
                })
                .collect();
            let r = session.step(&chunks, read);
            for h in hosts {
                let _ = h.join();
            }
            r
        });
        let secs = t0.elapsed().as_secs_f64();
        drop(chunks);
        for (i, c) in masks {
            if let Some(s) = self.slots[i].as_mut() {
                s.job.constraint = Some(c);
            }
        }
        let rows = match result {
            Ok(rows) => rows,
            Err(e) => {
                for i in outputs.iter().copied().chain(prefill.iter().map(|p| p.0)) {
                    self.fail(i, &e);
                }
                return;
            }
        };
        for &(i, _, end) in &prefill {
            if let Some(s) = self.slots[i].as_mut() {
                s.prefilled = end;
            }
        }
        self.metrics.step(outputs.len(), secs);
        for (i, row) in outputs.into_iter().zip(rows) {
            self.accept(i, &row);
        }
    }

    /// Samples slot `i`'s next token from `row` and sends what it produced.
    fn accept(&mut self, i: usize, row: &RowOut) {
        let tok = self.tok;
        let s = self.slots[i]
            .as_mut()
            .expect("an output row's slot is busy");
        s.next = None;
        // A row drawn on the device (`step_ahead`) carries its token.
        let id = match (row.sampled, s.job.constraint.as_mut()) {
            (Some(id), _) => Ok(id),
            (None, Some(c)) => match &row.logits {
                Some(l) => c
                    .pick(&mut s.sampler, l, &s.history)
                    .map_err(|e| e.to_string()),
                None => Err("a constrained step read back no logits".into()),
            },
            (None, None) => s
                .sampler
                .sample_row(row, &s.history)
                .map_err(|e| e.to_string()),
        };
        // The grammar follows every token; complete, it ends the request.
        let id = id.and_then(|id| match s.job.constraint.as_mut() {
            Some(c) => c
                .accept(id)
                .map(|done| (id, done))
                .map_err(|e| e.to_string()),
            None => Ok((id, false)),
        });
        let (id, complete) = match id {
            Ok(x) => x,
            Err(e) => {
                self.fail(i, &e);
                return;
            }
        };
        let logprobs: Vec<TokenLogprob> = match (s.job.params.logprobs, &row.logits) {
            (Some(n), Some(l)) if !tok.is_eog(id) => vec![logprob(tok, l, id, n)],
            _ => vec![],
        };
        // `flush`: the stream ends here without a stop string, so what the decoder and the stop
        // matcher hold back goes out too.
        let now = Instant::now();
        match s.last_token.replace(now) {
            None => self
                .metrics
                .latency
                .time_to_first_token
                .observe((now - s.arrived).as_secs_f64()),
            Some(t) => self
                .metrics
                .latency
                .inter_token_latency
                .observe((now - t).as_secs_f64()),
        }
        let (mut text, mut finish, flush) = if tok.is_eog(id) {
            (String::new(), Some(Finish::Stop), true)
        } else {
            s.generated += 1;
            s.history.push(id);
            let r = s.stops.push(&s.decoder.push(id));
            if r.stopped {
                (r.text, Some(Finish::Stop), false)
            } else if complete {
                (r.text, Some(Finish::Stop), true)
            } else if s.generated == s.job.params.max_tokens {
                (r.text, Some(Finish::Length), true)
            } else {
                (r.text, None, false)
            }
        };
        if flush {
            let r = s.stops.push(&s.decoder.finish());
            text.push_str(&r.text);
            if r.stopped {
                finish = Some(Finish::Stop);
            } else {
                text.push_str(&s.stops.finish());
            }
        }
        if !text.is_empty() || !logprobs.is_empty() {
            let _ = s.job.events.send(Event::Text { text, logprobs });
        }
        match finish {
            None => s.next = Some(id),
            Some(f) => {
                let usage = Usage {
                    prompt_tokens: s.job.prompt.len(),
                    cached_tokens: s.cached,
                    completion_tokens: s.generated,
                };
                // The slot is free before the client hears the end.
                let events = s.job.events.clone();
                Metrics::inc(match f {
                    Finish::Stop | Finish::ToolCalls => &self.metrics.finished_stop,
                    Finish::Length => &self.metrics.finished_length,
                });
                self.metrics
                    .latency
                    .request_latency
                    .observe((now - s.arrived).as_secs_f64());
                self.free(i);
                let _ = events.send(Event::Done { finish: f, usage });
            }
        }
    }
}

/// The log-probability of `id` under `logits`, with the `n` most likely tokens.
fn logprob(tok: &Tokenizer, logits: &[f32], id: u32, n: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max
        + logits
            .iter()
            .map(|&l| ((l - max) as f64).exp())
            .sum::<f64>()
            .ln() as f32;
    let entry = |id: u32| {
        let bytes = tok.piece(id).into_owned();
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            logits[id as usize] - lse,
        )
    };
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    let n = n.min(order.len());
    if n > 0 {
        order.select_nth_unstable_by(n - 1, |&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
    }
    order.truncate(n);
    order.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    let (token, bytes, logprob) = entry(id);
    TokenLogprob {
        token,
        bytes,
        logprob,
        top: order.into_iter().map(entry).collect(),
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}
