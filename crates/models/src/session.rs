//! A model loaded on a backend with its KV cache: feeds tokens of one or several sequences in
//! chunks and returns, per output row, the argmax, the top-K candidates or the whole logits row.
//!
//! Step graphs are compiled for chunk sizes that are powers of two up to `ubatch`, all sharing one
//! KV cache (`Backend::compile_shared`). A session holds `n_seq` sequences (llama.cpp's unified KV
//! cache): sequence `s` owns cache rows `s·n_ctx .. (s+1)·n_ctx`, its token at position `p` is
//! written to row `s·n_ctx + p`, and each query's mask row opens only its own sequence's rows up to
//! its position (and inside the sliding window for local layers, `StepGraph::mask_swa`). So one
//! run can carry tokens of different sequences: a decode step of every active sequence, plus a
//! chunk of a new sequence's prompt (continuous batching, see [`Session::step`]).
//!
//! A session also compiles its one-token graph for windows of the cache: each sequence's first
//! [`SPAN_MIN`] rows, four times that, … and (with several sequences, up to
//! [`WINDOWED_SEQS`]) its whole `n_ctx` ([`StepShape::kv_first`], [`StepShape::n_kv`]). A decode
//! step runs the narrowest window that holds every row its sequence has written, so early in a
//! long context its attention walks the rows written so far, without the split and combine a
//! long cache needs, and a lone request of a server's several slots walks only its own rows
//! (llama.cpp attends only its cache's used cells). The step that crosses into a wider window
//! runs another compiled graph, which cannot be fed its token on the device:
//! [`Session::can_feed`].
//!
//! The tokens of a step are cut into runs of the compiled sizes. With one sequence a run is the
//! largest size that fits (so single-sequence results do not depend on this module's batching
//! rules); with several, a short remainder is padded up to the next size instead of split, the
//! padding tokens writing into one scratch cache row that no query sees.
//!
//! Read-back: every step graph ends in the GPU output head of `arch::common` (argmax and top-K of
//! each output row), so a decode step reads back 4 bytes per sequence for greedy decoding, or
//! [`GPU_TOP_K`] candidates for sampling, instead of the whole vocabulary ([`Readback`]). An
//! all-logits session (perplexity) reads every row whole and builds neither head nor draw.
//!
//! After the head this module adds a draw from those candidates (`Graph::sample`) under
//! per-row [`SampleParams`] given with a run ([`Session::step_drawn`], [`Session::queue_decode`]):
//! the token llama.cpp's default sampler picks, made on the device, so sampled decoding can feed
//! it to the next step there ([`NextToken::Sampled`]) the way greedy decoding feeds the argmax.
//! Every step graph has it (one workgroup per output row over [`GPU_TOP_K`] values, against a
//! vocabulary-sized product and top-K before it): rows given no draw run it as an argmax and read
//! nothing of it.
//!
//! Reads are awaited ([`wgllm_core::Executable::read_async`]): [`Session::step_async`] is the
//! browser's way, where a GPU readback completes on a later turn of the event loop; the blocking
//! methods run the same code, whose futures every native backend completes at once.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use wgllm_core::backend::Ticket;
use wgllm_core::op::SampleParams;
use wgllm_core::{Backend, DType, Executable, TensorId};
use wgllm_gguf::GgufFile;

use crate::arch::{Architecture, StepGraph, StepShape};
use crate::error::ModelError;

pub use crate::arch::GPU_TOP_K;

/// The narrowest window of a sequence's cache rows a decode graph attends; each wider one is four
/// times the last, up to `n_ctx`.
pub const SPAN_MIN: usize = 256;

/// Sessions of at most this many sequences compile decode windows for each (a graph per window
/// and sequence); more sequences decode over the whole cache.
pub const WINDOWED_SEQS: usize = 16;

/// How a session is set up.
#[derive(Clone, Copy, Debug)]
pub struct SessionConfig {
    /// KV cache capacity in tokens (of each sequence).
    pub n_ctx: usize,
    /// Largest chunk of prompt tokens processed in one run.
    pub ubatch: usize,
    /// KV cache dtype.
    pub kv_dtype: DType,
    /// Return logits for every token (perplexity) instead of only the last one.
    pub all_logits: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            n_ctx: 2048,
            ubatch: 256,
            kv_dtype: DType::F16,
            all_logits: false,
        }
    }
}

/// What a step reads back for its output rows; each level includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Readback {
    /// The index of the largest logit (4 bytes a row).
    Argmax,
    /// And the [`Session::candidates`] largest logits with their ids, largest first.
    TopK,
    /// And the whole row of `n_vocab` logits.
    Logits,
}

/// What one output row of a step produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RowOut {
    /// The first index of the largest logit (computed on the backend).
    pub argmax: u32,
    /// `(id, logit)` of the largest logits, largest first, ties to the lower id (with
    /// [`Readback::TopK`] or more).
    pub top: Option<Vec<(u32, f32)>>,
    /// The whole row (with [`Readback::Logits`]).
    pub logits: Option<Vec<f32>>,
    /// The token drawn on the backend from the top-K candidates, for a row the run was given
    /// [`SampleParams`] for.
    pub sampled: Option<u32>,
}

/// Tokens appended to one sequence by a [`Session::step`].
#[derive(Clone, Copy, Debug)]
pub struct SeqChunk<'a> {
    pub seq: usize,
    pub tokens: &'a [u32],
    /// Produce a [`RowOut`] for the last token.
    pub output: bool,
}

struct Step {
    graph: StepGraph,
    exe: Box<dyn Executable>,
    /// The draw after the output head; `None` with the head (all-logits sessions).
    draw: Option<Draw>,
}

/// The draw of a step graph's output rows from their candidates.
#[derive(Clone, Copy)]
struct Draw {
    /// F32 `[SampleParams::WORDS, n_outputs]`: each output row's draw.
    params: TensorId,
    /// I32 `[n_outputs]`: the token drawn from each row's candidates.
    sampled: TensorId,
}

/// One token of a run: which cache row it writes and which rows it sees.
#[derive(Clone, Copy, Debug)]
struct Tok {
    token: u32,
    pos: usize,
    seq: usize,
    out: bool,
    /// The draw of an `out` token's row, when the run draws one.
    draw: Option<SampleParams>,
}

/// A model ready to evaluate tokens.
pub struct Session {
    arch: Architecture,
    /// The compiled sizes over the whole cache, largest first; then the one-token step over
    /// windows of each sequence's rows.
    steps: Vec<Step>,
    /// Tokens in the cache, per sequence.
    lens: Vec<usize>,
    cfg: SessionConfig,
    /// The step that ran last and the sequence whose last token its first output row is, while
    /// that row still describes the sequence's last cached token (a truncation or reset clears
    /// it): what [`NextToken::Argmax`] and [`NextToken::Sampled`] feed from.
    last_run: Option<(usize, usize)>,
}

/// The token of a decode step queued by [`Session::queue_decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextToken {
    /// This token.
    Id(u32),
    /// The argmax of the decode step queued just before this one, taken on the device: greedy
    /// decoding can queue step `t + 1` before the host has read step `t`.
    Argmax,
    /// The token drawn by the decode step queued just before this one (its [`SampleParams`];
    /// the argmax when it was given none), taken on the device: sampled decoding queues ahead
    /// like greedy decoding.
    Sampled,
}

/// A one-token decode step of a sequence, queued by [`Session::queue_decode`]; its row comes
/// from [`Session::finish_decode`].
#[derive(Debug)]
#[must_use = "a queued step's row is read by Session::finish_decode"]
pub struct QueuedStep {
    ticket: Ticket,
    step: usize,
    read: Readback,
    drawn: bool,
}

/// The inputs of one run, and which of its tokens produce output rows.
struct Prepared {
    inputs: Vec<(TensorId, Vec<u8>)>,
    /// Per output row: whether it was given a draw.
    drawn: Vec<bool>,
}

impl Session {
    /// Builds and compiles the step graphs of `file` on `backend`, for one sequence.
    ///
    /// A file streamed past (`GgufStream`, header only) builds graphs on resident weights:
    /// `backend` must already hold every tensor (`WebGpuBackend::upload_weight`), else the
    /// compilation names the first one missing.
    pub fn new(
        backend: &dyn Backend,
        file: &GgufFile,
        cfg: SessionConfig,
    ) -> Result<Session, ModelError> {
        Session::with_sequences(backend, file, cfg, 1)
    }

    /// Builds a session of `n_seq` sequences of `cfg.n_ctx` tokens each, whose tokens can share
    /// a run. Graphs are compiled up to the larger of `ubatch` and `n_seq` (rounded up to a power
    /// of two), with one output row per sequence.
    pub fn with_sequences(
        backend: &dyn Backend,
        file: &GgufFile,
        cfg: SessionConfig,
        n_seq: usize,
    ) -> Result<Session, ModelError> {
        let arch = Architecture::from_gguf(file)?;
        if n_seq == 0 || cfg.n_ctx == 0 {
            return Err(ModelError::BadSession(format!(
                "{n_seq} sequences of {} tokens: both must be positive",
                cfg.n_ctx
            )));
        }
        let ubatch = cfg.ubatch.clamp(1, cfg.n_ctx * n_seq);
        let largest = ubatch.max(n_seq.next_power_of_two());
        // The scratch row that padding tokens write (several sequences only).
        let n_kv = n_seq * cfg.n_ctx + usize::from(n_seq > 1);
        let mut sizes = vec![];
        let mut s = 1usize;
        while s <= largest {
            sizes.push(s);
            s *= 2;
        }
        // (tokens, first row, rows) of each graph: the sizes over the whole cache, then the
        // one-token windows of each sequence (narrower than the whole cache).
        let mut shapes: Vec<(usize, usize, usize)> =
            sizes.iter().rev().map(|&n| (n, 0, n_kv)).collect();
        let mut spans = vec![];
        let mut span = SPAN_MIN;
        while span < cfg.n_ctx {
            spans.push(span);
            span *= 4;
        }
        if n_seq > 1 {
            spans.push(cfg.n_ctx);
        }
        if n_seq <= WINDOWED_SEQS {
            for seq in 0..n_seq {
                shapes.extend(spans.iter().map(|&span| (1, seq * cfg.n_ctx, span)));
            }
        }
        let graphs = shapes
            .into_iter()
            .map(|(n, first, rows)| {
                let shape = StepShape {
                    n_tokens: n as u32,
                    n_ctx: n_kv as u32,
                    kv_first: first as u32,
                    n_kv: rows as u32,
                    n_outputs: if cfg.all_logits { n } else { n.min(n_seq) } as u32,
                    kv_dtype: cfg.kv_dtype,
                    head: !cfg.all_logits,
                };
                let mut step = arch.build_step(file, shape)?;
                let draw = add_draw(&mut step)?;
                Ok((step, draw))
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let (graphs, draws): (Vec<StepGraph>, Vec<_>) = graphs.into_iter().unzip();
        let refs: Vec<&wgllm_core::Graph> = graphs.iter().map(|s| &s.graph).collect();
        let exes = backend.compile_shared(&refs)?;
        let steps = graphs
            .into_iter()
            .zip(exes)
            .zip(draws)
            .map(|((graph, exe), draw)| Step { graph, exe, draw })
            .collect();
        Ok(Session {
            arch,
            steps,
            lens: vec![0; n_seq],
            cfg,
            last_run: None,
        })
    }

    /// The architecture and its hyperparameters.
    pub fn architecture(&self) -> &Architecture {
        &self.arch
    }

    /// Tokens already in the KV cache of sequence 0.
    pub fn n_past(&self) -> usize {
        self.lens[0]
    }

    /// KV cache capacity of each sequence.
    pub fn n_ctx(&self) -> usize {
        self.cfg.n_ctx
    }

    /// Sequences the cache holds.
    pub fn n_seq(&self) -> usize {
        self.lens.len()
    }

    /// Tokens in the cache of sequence `seq` (0 when there is no such sequence).
    pub fn seq_len(&self, seq: usize) -> usize {
        self.lens.get(seq).copied().unwrap_or(0)
    }

    /// How many candidates [`Readback::TopK`] returns: `min(GPU_TOP_K, n_vocab)`.
    pub fn candidates(&self) -> usize {
        GPU_TOP_K.min(self.arch.n_vocab())
    }

    /// Forgets the cached tokens of sequence 0 (the next `eval` starts at position 0).
    pub fn reset(&mut self) {
        self.lens[0] = 0;
        self.last_run = None;
    }

    /// Keeps only the first `n` cached tokens of sequence 0 (a chat turn that shares a prefix
    /// with the last).
    pub fn truncate(&mut self, n: usize) {
        self.truncate_seq(0, n);
    }

    /// Keeps only the first `n` cached tokens of sequence `seq` (none such: nothing to do).
    pub fn truncate_seq(&mut self, seq: usize, n: usize) {
        if let Some(l) = self.lens.get_mut(seq) {
            if n < *l && self.last_run.is_some_and(|r| r.1 == seq) {
                self.last_run = None;
            }
            *l = (*l).min(n);
        }
    }

    /// Forgets the cached tokens of sequence `seq`.
    pub fn clear_seq(&mut self, seq: usize) {
        if let Some(l) = self.lens.get_mut(seq) {
            *l = 0;
            if self.last_run.is_some_and(|r| r.1 == seq) {
                self.last_run = None;
            }
        }
    }

    /// Appends `tokens` to sequence 0 and returns logits: one row of `n_vocab` for the last
    /// token, or one per token when the session was made with `all_logits`.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.check(0, tokens)?;
        let start = self.lens[0];
        let last = tokens.len().saturating_sub(1);
        let toks: Vec<Tok> = tokens
            .iter()
            .enumerate()
            .map(|(i, &token)| Tok {
                token,
                pos: start + i,
                seq: 0,
                out: self.cfg.all_logits || i == last,
                draw: None,
            })
            .collect();
        let rows = now(self.run_all(&toks, Readback::Logits))?;
        self.lens[0] += tokens.len();
        Ok(rows.into_iter().filter_map(|r| r.logits).collect())
    }

    /// Appends each chunk's tokens to its sequence, all in as few runs as the compiled sizes
    /// allow, and returns one [`RowOut`] per chunk with `output` (in `batch` order), holding what
    /// `read` asks for. A sequence may appear once per step.
    pub fn step(
        &mut self,
        batch: &[SeqChunk<'_>],
        read: Readback,
    ) -> Result<Vec<RowOut>, ModelError> {
        now(self.step_async(batch, read))
    }

    /// [`Session::step`] awaiting the backend's reads: the browser's way.
    pub async fn step_async(
        &mut self,
        batch: &[SeqChunk<'_>],
        read: Readback,
    ) -> Result<Vec<RowOut>, ModelError> {
        self.step_drawn_async(batch, read, &[]).await
    }

    /// [`Session::step`] that also draws a token on the backend for the first `draws.len()`
    /// output rows (in `batch` order), `draws[j]` the parameters of row `j`'s draw: their
    /// [`RowOut::sampled`].
    pub fn step_drawn(
        &mut self,
        batch: &[SeqChunk<'_>],
        read: Readback,
        draws: &[SampleParams],
    ) -> Result<Vec<RowOut>, ModelError> {
        now(self.step_drawn_async(batch, read, draws))
    }

    /// [`Session::step_drawn`] awaiting the backend's reads.
    pub async fn step_drawn_async(
        &mut self,
        batch: &[SeqChunk<'_>],
        read: Readback,
        draws: &[SampleParams],
    ) -> Result<Vec<RowOut>, ModelError> {
        let outputs = batch.iter().filter(|c| c.output && !c.tokens.is_empty());
        if draws.len() > outputs.count() {
            return Err(ModelError::BadSession(format!(
                "{} draws for fewer output rows",
                draws.len()
            )));
        }
        let mut draws = draws.iter().copied();
        let mut toks = Vec::new();
        for (i, c) in batch.iter().enumerate() {
            if batch[..i].iter().any(|o| o.seq == c.seq) {
                return Err(ModelError::BadSession(format!(
                    "sequence {} appears twice in one step",
                    c.seq
                )));
            }
            self.check(c.seq, c.tokens)?;
            let start = self.lens[c.seq];
            let last = c.tokens.len().saturating_sub(1);
            let draw = match c.output && !c.tokens.is_empty() {
                true => draws.next(),
                false => None,
            };
            toks.extend(c.tokens.iter().enumerate().map(|(j, &token)| Tok {
                token,
                pos: start + j,
                seq: c.seq,
                out: c.output && j == last,
                draw: draw.filter(|_| j == last),
            }));
        }
        let rows = self.run_all(&toks, read).await?;
        for c in batch {
            self.lens[c.seq] += c.tokens.len();
        }
        Ok(rows)
    }

    /// Checks that `tokens` fit sequence `seq` and the vocabulary.
    fn check(&self, seq: usize, tokens: &[u32]) -> Result<(), ModelError> {
        let Some(&len) = self.lens.get(seq) else {
            return Err(ModelError::BadSession(format!(
                "sequence {seq} does not exist (the session holds {})",
                self.lens.len()
            )));
        };
        if len + tokens.len() > self.cfg.n_ctx {
            return Err(ModelError::ContextFull {
                need: len + tokens.len(),
                ctx: self.cfg.n_ctx,
                max: self.arch.n_ctx_train(),
            });
        }
        let n_vocab = self.arch.n_vocab();
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ModelError::BadToken(bad));
        }
        Ok(())
    }

    /// Runs `toks` in runs of the compiled sizes; returns the rows of the tokens marked `out`.
    async fn run_all(&mut self, toks: &[Tok], read: Readback) -> Result<Vec<RowOut>, ModelError> {
        let mut out = Vec::new();
        let mut rest = toks;
        while !rest.is_empty() {
            let i = self.run_index(rest.len());
            let n = self.steps[i].graph.shape.n_tokens as usize;
            let (run, tail) = rest.split_at(n.min(rest.len()));
            let i = self.narrowest(i, run);
            out.extend(self.run(i, run, read).await?);
            rest = tail;
        }
        Ok(out)
    }

    /// The step that runs the next tokens when `rest` remain: the largest that fits, or with
    /// several sequences the next larger one when padding wastes at most a quarter of it or it
    /// is no larger than one token per sequence (a decode step is one run).
    fn run_index(&self, rest: usize) -> usize {
        let fits = self
            .steps
            .iter()
            .position(|s| s.graph.shape.n_tokens as usize <= rest)
            .expect("the one-token step always fits");
        if self.n_seq() == 1 || fits == 0 {
            return fits;
        }
        let up = self.steps[fits - 1].graph.shape.n_tokens as usize;
        if up <= self.n_seq().next_power_of_two() || (up - rest) * 4 <= up {
            fits - 1
        } else {
            fits
        }
    }

    /// The step of step `i`'s size over the narrowest window that holds every cache row the
    /// tokens of `run` see or write (their sequences' rows up to their positions).
    fn narrowest(&self, i: usize, run: &[Tok]) -> usize {
        let n = self.steps[i].graph.shape.n_tokens;
        let n_ctx = self.cfg.n_ctx;
        let lo = run.iter().map(|t| t.seq * n_ctx).min().unwrap_or(0);
        let hi = run
            .iter()
            .map(|t| t.seq * n_ctx + t.pos + 1)
            .max()
            .unwrap_or(1);
        self.steps
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let (first, rows) = (s.graph.shape.kv_first as usize, s.graph.shape.n_kv as usize);
                s.graph.shape.n_tokens == n && first <= lo && first + rows >= hi
            })
            .min_by_key(|(_, s)| s.graph.shape.n_kv)
            .map_or(i, |(j, _)| j)
    }

    /// The one-token step a decode step of sequence `seq` runs now.
    fn decode_step(&self, seq: usize) -> usize {
        let full = self
            .steps
            .iter()
            .position(|s| s.graph.shape.n_tokens == 1)
            .expect("the one-token step over the whole cache is compiled");
        let tok = Tok {
            token: 0,
            pos: self.seq_len(seq),
            seq,
            out: true,
            draw: None,
        };
        self.narrowest(full, &[tok])
    }

    /// Whether a decode step of sequence `seq` queued now can take its token from the decode
    /// step queued just before ([`NextToken::Argmax`], [`NextToken::Sampled`]): that step was
    /// of this sequence, its cache is as that step left it, and this step runs the same compiled
    /// graph (the first step past a window's end runs a wider one: its token comes from the
    /// host, [`NextToken::Id`]).
    pub fn can_feed(&self, seq: usize) -> bool {
        self.last_run == Some((self.decode_step(seq), seq))
    }

    /// One run of step `i` over `run` (padded to its size); the rows of the `out` tokens.
    async fn run(
        &mut self,
        i: usize,
        run: &[Tok],
        read: Readback,
    ) -> Result<Vec<RowOut>, ModelError> {
        let p = self.prepare(i, run)?;
        let inputs: Vec<(TensorId, &[u8])> = p.inputs.iter().map(|(t, d)| (*t, &d[..])).collect();
        // With several sequences the argmax may be another sequence's.
        self.last_run = (self.n_seq() == 1).then_some((i, 0));
        let step = &mut self.steps[i];
        if p.drawn.is_empty() {
            step.exe.run(&inputs)?;
            return Ok(vec![]);
        }
        let sampled = p.drawn.contains(&true);
        let outputs = outputs(step, read, sampled);
        let ticket = step.exe.submit(&inputs, &[], &outputs)?;
        let bytes = step.exe.finish(ticket).await?;
        self.rows(i, read, &p.drawn, bytes)
    }

    /// Queues a one-token decode step of sequence `seq` without waiting for it: its token, at
    /// the sequence's next position, is `token` or the argmax or drawn token of the decode step
    /// of `seq` queued just before ([`NextToken::Argmax`], [`NextToken::Sampled`]); with a
    /// `draw` its row also draws a token on the backend ([`RowOut::sampled`]). The position
    /// counts as filled at once; a caller that drops a step it queued ahead (its predecessor
    /// ended the generation) finishes it and truncates the sequence ([`Session::truncate_seq`]).
    /// The step runs the one-token graph whatever the number of sequences, so its row may
    /// differ from a batched [`Session::step`]'s in rounding.
    pub fn queue_decode(
        &mut self,
        seq: usize,
        token: NextToken,
        read: Readback,
        draw: Option<SampleParams>,
    ) -> Result<QueuedStep, ModelError> {
        let i = self.decode_step(seq);
        let id = match token {
            NextToken::Id(t) => t,
            NextToken::Argmax | NextToken::Sampled if self.can_feed(seq) => 0,
            NextToken::Argmax | NextToken::Sampled => {
                return Err(ModelError::BadSession(format!(
                    "a step fed the previous step's argmax or drawn token must follow a \
                     decode step of sequence {seq} with its cache as it is, over the same \
                     span of the cache (Session::can_feed)"
                )))
            }
        };
        self.check(seq, &[id])?;
        let tok = Tok {
            token: id,
            pos: self.lens[seq],
            seq,
            out: true,
            draw,
        };
        let p = self.prepare(i, &[tok])?;
        let step = &mut self.steps[i];
        let g = &step.graph;
        let source = match (token, g.head, step.draw) {
            (NextToken::Id(_), ..) => None,
            (NextToken::Argmax, Some(head), _) => Some(head.argmax),
            (NextToken::Sampled, _, Some(draw)) => Some(draw.sampled),
            _ => return Err(no_head()),
        };
        let inputs: Vec<(TensorId, &[u8])> = p
            .inputs
            .iter()
            .filter(|(t, _)| !(source.is_some() && *t == g.tokens))
            .map(|(t, d)| (*t, &d[..]))
            .collect();
        let feeds: Vec<(TensorId, TensorId)> = source.map(|s| (g.tokens, s)).into_iter().collect();
        let drawn = draw.is_some();
        let ticket = step
            .exe
            .submit(&inputs, &feeds, &outputs(step, read, drawn))?;
        self.lens[seq] += 1;
        self.last_run = Some((i, seq));
        Ok(QueuedStep {
            ticket,
            step: i,
            read,
            drawn,
        })
    }

    /// The output row of a step queued by [`Session::queue_decode`], waiting for the device.
    pub fn finish_decode(&mut self, q: QueuedStep) -> Result<RowOut, ModelError> {
        now(self.finish_decode_async(q))
    }

    /// [`Session::finish_decode`] awaiting the backend's read: the browser's way.
    pub async fn finish_decode_async(&mut self, q: QueuedStep) -> Result<RowOut, ModelError> {
        let bytes = self.steps[q.step].exe.finish(q.ticket).await?;
        let mut rows = self.rows(q.step, q.read, &[q.drawn], bytes)?;
        Ok(rows.remove(0))
    }

    /// The inputs of a run of step `i` over `run`, padded to its size.
    fn prepare(&self, i: usize, run: &[Tok]) -> Result<Prepared, ModelError> {
        let (n_seq, n_ctx) = (self.n_seq(), self.cfg.n_ctx);
        let g = &self.steps[i].graph;
        let n = g.shape.n_tokens as usize;
        let kv = (g.shape.kv_first as usize, g.shape.n_kv as usize);
        let scratch = n_seq * n_ctx;
        let pad = Tok {
            token: 0,
            pos: 0,
            seq: n_seq,
            out: false,
            draw: None,
        };
        let toks: Vec<Tok> = run
            .iter()
            .copied()
            .chain(std::iter::repeat(pad))
            .take(n)
            .collect();
        let le32 = |v: i32| v.to_le_bytes();
        let tokens: Vec<u8> = toks.iter().flat_map(|t| le32(t.token as i32)).collect();
        let positions: Vec<u8> = toks.iter().flat_map(|t| le32(t.pos as i32)).collect();
        let row_of = |t: &Tok| {
            if t.seq == n_seq {
                scratch
            } else {
                t.seq * n_ctx + t.pos
            }
        };
        let slots: Vec<u8> = toks
            .iter()
            .flat_map(|t| (row_of(t) as i64).to_le_bytes())
            .collect();
        let mask = mask_bytes(&toks, n_seq, n_ctx, kv, None);
        let n_out = g.shape.n_outputs as usize;
        let outs: Vec<usize> = (0..run.len()).filter(|&j| run[j].out).collect();
        if outs.len() > n_out {
            return Err(ModelError::BadSession(format!(
                "{} output rows in a run of {n} tokens with {n_out} outputs",
                outs.len()
            )));
        }
        let fill = outs.last().copied().unwrap_or(run.len() - 1);
        let out_rows: Vec<u8> = outs
            .iter()
            .copied()
            .chain(std::iter::repeat(fill))
            .take(n_out)
            .flat_map(|j| le32(j as i32))
            .collect();
        // Rows without a draw (and padding rows) draw the argmax.
        let draw_params: Vec<u8> = (0..n_out)
            .flat_map(|r| {
                let d = outs.get(r).and_then(|&j| run[j].draw);
                d.unwrap_or(SampleParams::ARGMAX).to_bytes()
            })
            .collect();
        let drawn: Vec<bool> = outs.iter().map(|&j| run[j].draw.is_some()).collect();
        let mut inputs = vec![
            (g.tokens, tokens),
            (g.positions, positions),
            (g.kv_slots, slots),
            (g.mask, mask),
            (g.out_rows, out_rows),
        ];
        match self.steps[i].draw {
            Some(draw) => inputs.push((draw.params, draw_params)),
            None if drawn.contains(&true) => return Err(no_head()),
            None => {}
        }
        if let Some(swa) = g.mask_swa {
            inputs.push((
                swa.mask,
                mask_bytes(&toks, n_seq, n_ctx, kv, Some(swa.window)),
            ));
        }
        Ok(Prepared { inputs, drawn })
    }

    /// The first `drawn.len()` output rows of step `i` from the bytes of
    /// [`outputs`]`(step, read, any drawn)`; `drawn[r]`: row `r` was given a draw.
    fn rows(
        &self,
        i: usize,
        read: Readback,
        drawn: &[bool],
        bytes: Vec<Vec<u8>>,
    ) -> Result<Vec<RowOut>, ModelError> {
        let n_vocab = self.arch.n_vocab();
        let n_out = self.steps[i].graph.shape.n_outputs as usize;
        let mut bytes = bytes.into_iter();
        let mut next = || {
            bytes
                .next()
                .ok_or_else(|| ModelError::BadSession("a run returned too few outputs".into()))
        };
        if self.steps[i].graph.head.is_none() {
            let logits = next()?;
            return Ok((0..drawn.len())
                .map(|r| host_row(f32s(&logits[4 * r * n_vocab..4 * (r + 1) * n_vocab]), read))
                .collect());
        }
        let argmax = i32s(&next()?);
        let sampled = match drawn.contains(&true) {
            true => i32s(&next()?),
            false => vec![],
        };
        let top = if read >= Readback::TopK {
            let ids = i32s(&next()?);
            let vals = f32s(&next()?);
            let k = ids.len() / n_out;
            Some((ids, vals, k))
        } else {
            None
        };
        let logits = if read >= Readback::Logits {
            Some(next()?)
        } else {
            None
        };
        Ok((0..drawn.len())
            .map(|r| RowOut {
                argmax: argmax[r] as u32,
                sampled: drawn[r].then(|| sampled[r] as u32),
                top: top.as_ref().map(|(ids, vals, k)| {
                    (r * k..(r + 1) * k)
                        .map(|j| (ids[j] as u32, vals[j]))
                        .collect()
                }),
                logits: logits
                    .as_ref()
                    .map(|l| f32s(&l[4 * r * n_vocab..4 * (r + 1) * n_vocab])),
            })
            .collect())
    }
}

/// The error for a feed or draw that needs the output head a session left out.
fn no_head() -> ModelError {
    ModelError::BadSession(
        "an all-logits session (perplexity) has no output head to feed or draw tokens from".into(),
    )
}

/// A row of a step without the output head, from its logits: the argmax and (with
/// [`Readback::TopK`]) the [`GPU_TOP_K`] largest, ranked as the head ranks them (largest first,
/// NaN above every number, ties to the lower id).
fn host_row(logits: Vec<f32>, read: Readback) -> RowOut {
    let rank = |a: &(u32, f32), b: &(u32, f32)| {
        let key = |v: f32| (v.is_nan(), v);
        key(b.1)
            .partial_cmp(&key(a.1))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.0.cmp(&b.0))
    };
    let mut order: Vec<(u32, f32)> = logits
        .iter()
        .copied()
        .enumerate()
        .map(|(i, v)| (i as u32, v))
        .collect();
    let k = GPU_TOP_K.min(order.len());
    if k > 0 && k < order.len() {
        order.select_nth_unstable_by(k - 1, rank);
    }
    order.truncate(k);
    order.sort_by(rank);
    RowOut {
        argmax: order.first().map_or(0, |t| t.0),
        top: (read >= Readback::TopK).then_some(order),
        logits: (read >= Readback::Logits).then_some(logits),
        sampled: None,
    }
}

/// The draw after the output head of `step`, when it has one.
fn add_draw(step: &mut StepGraph) -> Result<Option<Draw>, ModelError> {
    let Some(head) = step.head else {
        return Ok(None);
    };
    let g = &mut step.graph;
    let n_out = u64::from(step.shape.n_outputs);
    let k = g.ne(head.top_ids)[0];
    let vals = g.reshape(head.top_vals, [k, n_out, 1, 1])?;
    let params = g.input(
        "draw_params",
        DType::F32,
        [SampleParams::WORDS, n_out, 1, 1],
    )?;
    let sampled = g.sample(vals, head.top_ids, params)?;
    g.set_name(sampled, "sampled");
    g.mark_output(sampled)?;
    Ok(Some(Draw { params, sampled }))
}

/// The outputs a run reads back for `read` (and the drawn tokens with `sampled`), in the order
/// [`Session::rows`] takes them.
fn outputs(step: &Step, read: Readback, sampled: bool) -> Vec<TensorId> {
    let g = &step.graph;
    let (Some(head), Some(draw)) = (g.head, step.draw) else {
        return vec![g.logits];
    };
    let mut out = vec![head.argmax];
    if sampled {
        out.push(draw.sampled);
    }
    if read >= Readback::TopK {
        out.extend([head.top_ids, head.top_vals]);
    }
    if read >= Readback::Logits {
        out.push(g.logits);
    }
    out
}

/// The result of a future that needs no waiting: natively every backend's reads complete when
/// first polled. A backend whose reads must be awaited (WebGPU in the browser) gets an error
/// pointing to the `_async` methods instead of a blocked event loop.
pub fn now<T, E: From<ModelError>>(f: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(ModelError::BadSession(
            "this backend's reads must be awaited: use the async calls (Session::step_async, \
             generate_async, Embedder::embed_ids_async, Transcriber::transcribe_async)"
                .into(),
        )
        .into()),
    }
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(crate) fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The F32 `[n_kv, toks.len()]` mask over the `n_kv` cache rows from `first` (`kv`): 0 where
/// the key is visible, -inf elsewhere. A token of sequence `s` at position `p` sees rows
/// `s·n_ctx + j` for `j <= p`, and with a `window` only those with `p - window < j`; a padding
/// token (`seq == n_seq`) sees only the scratch row.
fn mask_bytes(
    toks: &[Tok],
    n_seq: usize,
    n_ctx: usize,
    (first, n_kv): (usize, usize),
    window: Option<u32>,
) -> Vec<u8> {
    let hidden = f32::NEG_INFINITY.to_le_bytes();
    let mut mask = Vec::with_capacity(n_kv * toks.len() * 4);
    for t in toks {
        let (lo, hi) = if t.seq == n_seq {
            (n_seq * n_ctx, n_seq * n_ctx + 1)
        } else {
            let from = window.map_or(0, |w| (t.pos + 1).saturating_sub(w as usize));
            (t.seq * n_ctx + from, t.seq * n_ctx + t.pos + 1)
        };
        let row = mask.len();
        mask.resize(row + n_kv * 4, 0);
        for (j, v) in mask[row..].chunks_exact_mut(4).enumerate() {
            let j = first + j;
            if j < lo || j >= hi {
                v.copy_from_slice(&hidden);
            }
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_without_the_head_ranks_as_the_head_does() {
        let logits = vec![1.0, f32::NAN, 3.0, 3.0, -1.0];
        let r = host_row(logits.clone(), Readback::TopK);
        assert_eq!(r.argmax, 1, "NaN ranks above every number");
        let ids: Vec<u32> = r.top.unwrap().iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 2, 3, 0, 4], "largest first, ties to the lower id");
        assert!(r.logits.is_none());
        let r = host_row(logits, Readback::Argmax);
        assert!(r.top.is_none());
        let many: Vec<f32> = (0..1000).map(|i| ((i * 37) % 1000) as f32).collect();
        let top = host_row(many, Readback::Logits).top.unwrap();
        assert_eq!(top.len(), GPU_TOP_K);
        assert_eq!(top[0], (27, 999.0));
        assert!(top.windows(2).all(|w| w[0].1 > w[1].1));
    }
}
