//! A model loaded on a backend with its KV cache: feeds tokens in chunks and returns logits.
//!
//! Step graphs are compiled for chunk sizes that are powers of two up to `ubatch`, all sharing one
//! KV cache (`Backend::compile_shared`); a prompt of any length is processed as a sum of those
//! chunks (largest first), and decoding uses the one-token graph. Every run is fed a causal mask,
//! and a sliding-window mask too when the architecture has local layers (`StepGraph::mask_swa`).

use wgllm_core::{Backend, DType, Executable};
use wgllm_gguf::GgufFile;

use crate::arch::{Architecture, StepGraph, StepShape};
use crate::error::ModelError;

/// How a session is set up.
#[derive(Clone, Copy, Debug)]
pub struct SessionConfig {
    /// KV cache capacity in tokens.
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

struct Step {
    graph: StepGraph,
    exe: Box<dyn Executable>,
}

/// A model ready to evaluate tokens.
pub struct Session {
    arch: Architecture,
    steps: Vec<Step>,
    n_past: usize,
    cfg: SessionConfig,
}

impl Session {
    /// Builds and compiles the step graphs of `file` on `backend`.
    pub fn new(
        backend: &dyn Backend,
        file: &GgufFile,
        cfg: SessionConfig,
    ) -> Result<Session, ModelError> {
        let arch = Architecture::from_gguf(file)?;
        let ubatch = cfg.ubatch.clamp(1, cfg.n_ctx.max(1));
        let mut sizes = vec![];
        let mut s = 1usize;
        while s <= ubatch {
            sizes.push(s);
            s *= 2;
        }
        let graphs = sizes
            .iter()
            .rev()
            .map(|&n| {
                let shape = StepShape {
                    n_tokens: n as u32,
                    n_ctx: cfg.n_ctx as u32,
                    n_outputs: if cfg.all_logits { n as u32 } else { 1 },
                    kv_dtype: cfg.kv_dtype,
                };
                arch.build_step(file, shape)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&wgllm_core::Graph> = graphs.iter().map(|s| &s.graph).collect();
        let exes = backend.compile_shared(&refs)?;
        let steps = graphs
            .into_iter()
            .zip(exes)
            .map(|(graph, exe)| Step { graph, exe })
            .collect();
        Ok(Session {
            arch,
            steps,
            n_past: 0,
            cfg,
        })
    }

    /// The architecture and its hyperparameters.
    pub fn architecture(&self) -> &Architecture {
        &self.arch
    }

    /// Tokens already in the KV cache.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// KV cache capacity.
    pub fn n_ctx(&self) -> usize {
        self.cfg.n_ctx
    }

    /// Forgets the cached tokens (the next `eval` starts at position 0).
    pub fn reset(&mut self) {
        self.n_past = 0;
    }

    /// Keeps only the first `n` cached tokens (a chat turn that shares a prefix with the last).
    pub fn truncate(&mut self, n: usize) {
        self.n_past = self.n_past.min(n);
    }

    /// Appends `tokens` to the sequence and returns logits: one row of `n_vocab` for the last
    /// token, or one per token when the session was made with `all_logits`.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, ModelError> {
        let n_vocab = self.arch.n_vocab();
        if self.n_past + tokens.len() > self.cfg.n_ctx {
            return Err(ModelError::ContextFull {
                need: self.n_past + tokens.len(),
                ctx: self.cfg.n_ctx,
                max: self.arch.n_ctx_train(),
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ModelError::BadToken(bad));
        }
        let mut out = Vec::new();
        let mut rest = tokens;
        while !rest.is_empty() {
            let step = self
                .steps
                .iter_mut()
                .find(|s| s.graph.shape.n_tokens as usize <= rest.len())
                .expect("the one-token step always fits");
            let n = step.graph.shape.n_tokens as usize;
            let (chunk, tail) = rest.split_at(n);
            let rows = run_step(step, chunk, self.n_past, self.cfg.n_ctx, n_vocab)?;
            if self.cfg.all_logits || tail.is_empty() {
                out.extend(rows);
            }
            self.n_past += n;
            rest = tail;
        }
        if !self.cfg.all_logits {
            out.truncate(1);
        }
        Ok(out)
    }
}

fn run_step(
    step: &mut Step,
    chunk: &[u32],
    n_past: usize,
    n_ctx: usize,
    n_vocab: usize,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let n = chunk.len();
    let g = &step.graph;
    let tokens: Vec<u8> = chunk
        .iter()
        .flat_map(|&t| (t as i32).to_le_bytes())
        .collect();
    let positions: Vec<u8> = (0..n)
        .flat_map(|i| ((n_past + i) as i32).to_le_bytes())
        .collect();
    let slots: Vec<u8> = (0..n)
        .flat_map(|i| ((n_past + i) as i64).to_le_bytes())
        .collect();
    let mask = mask_bytes(n_past, n, n_ctx, None);
    let mask_swa = g
        .mask_swa
        .map(|swa| (swa.mask, mask_bytes(n_past, n, n_ctx, Some(swa.window))));
    let n_out = g.shape.n_outputs as usize;
    let out_rows: Vec<u8> = (n - n_out..n)
        .flat_map(|i| (i as i32).to_le_bytes())
        .collect();
    let mut inputs = vec![
        (g.tokens, &tokens[..]),
        (g.positions, &positions),
        (g.kv_slots, &slots),
        (g.mask, &mask),
        (g.out_rows, &out_rows),
    ];
    if let Some((id, bytes)) = &mask_swa {
        inputs.push((*id, bytes));
    }
    step.exe.run(&inputs)?;
    let bytes = step.exe.read(g.logits)?;
    let vals: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(vals.chunks_exact(n_vocab).map(|r| r.to_vec()).collect())
}

/// The F32 `[n_ctx, n]` mask of `n` queries at positions `n_past..n_past + n` (cache slot `j`
/// holds position `j`): 0 where the key is visible, -inf elsewhere. Causal, and with a `window`
/// key `j` is visible to position `p` only when `p - window < j`.
fn mask_bytes(n_past: usize, n: usize, n_ctx: usize, window: Option<u32>) -> Vec<u8> {
    let mut mask = Vec::with_capacity(n_ctx * n * 4);
    for p in n_past..n_past + n {
        for j in 0..n_ctx {
            let visible = j <= p && window.is_none_or(|w| j + w as usize > p);
            let v = if visible { 0.0f32 } else { f32::NEG_INFINITY };
            mask.extend_from_slice(&v.to_le_bytes());
        }
    }
    mask
}
