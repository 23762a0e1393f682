//! What the decoder architectures share: hyperparameters from `<arch>.*` metadata, the step
//! inputs, and a [`Builder`] with the blocks llama.cpp's model files are made of (`build_norm`,
//! `build_attn` with the KV cache write, `build_ffn`, `build_moe_ffn`, the output head), plus
//! the plain pre-norm decoder that llama, qwen2 and qwen3 differ from only in flags (and
//! qwen3moe in its mixture-of-experts feed-forward).
//!
//! Adding an architecture: read its extra metadata next to an [`Hparams`], then either describe it
//! as a [`Flavor`] of [`build_prenorm_decoder`] or write its layer loop with the `Builder` blocks
//! (as `gemma3.rs` does).

use wgllm_core::op::{BinaryOp, GluOp, RopeMode, RopeParams};
use wgllm_core::{DType, Graph, TensorId};
use wgllm_gguf::GgufFile;

use super::{weight, Head, StepGraph, StepShape, SwaMask, GPU_TOP_K};
use crate::error::ModelError;

/// Hyperparameters every decoder here has, read from `<arch>.*` metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u32,
    pub n_ff: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    /// Per-head dimension of Q, K and V (`attention.key_length`, else `n_embd / n_head`).
    pub head_dim: u64,
    /// Rotated dimensions of each head.
    pub n_rot: u32,
    pub rope_base: f32,
    /// `1 / rope.scaling.factor` for linear scaling, else 1.
    pub rope_freq_scale: f32,
    pub rms_eps: f32,
    pub n_ctx_train: u64,
    /// The output matrix is the token embedding (no `output.weight`).
    pub tied_output: bool,
}

impl Hparams {
    /// Reads the hyperparameters under the file's `general.architecture` prefix, checking they
    /// fit together.
    pub fn from_gguf(f: &GgufFile) -> Result<Hparams, ModelError> {
        let arch = f.architecture()?.to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let opt_u64 = |k: &str| f.get(&key(k)).map(|_| f.get_u64(&key(k))).transpose();
        let bad = |k: &str, v: &dyn std::fmt::Display, why: &str| ModelError::BadMetadata {
            key: key(k),
            value: v.to_string(),
            why: why.into(),
        };
        let n_embd = f.get_u64(&key("embedding_length"))?;
        let n_head = f.get_u64(&key("attention.head_count"))?;
        let n_head_kv = opt_u64("attention.head_count_kv")?.unwrap_or(n_head);
        if n_head == 0 {
            return Err(bad("attention.head_count", &n_head, "must be positive"));
        }
        if n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(bad(
                "attention.head_count_kv",
                &n_head_kv,
                "must divide head_count",
            ));
        }
        let head_dim = match opt_u64("attention.key_length")? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(bad(
                    "attention.head_count",
                    &n_head,
                    "must divide embedding_length (there is no attention.key_length)",
                ))
            }
        };
        if head_dim == 0 {
            return Err(bad("attention.key_length", &head_dim, "must be positive"));
        }
        if let Some(dv) = opt_u64("attention.value_length")? {
            if dv != head_dim {
                return Err(bad(
                    "attention.value_length",
                    &dv,
                    "must equal the key length (other value sizes are not supported)",
                ));
            }
        }
        let n_rot = match f.get(&key("rope.dimension_count")) {
            Some(_) => f.get_u32(&key("rope.dimension_count"))?,
            None => u32::try_from(head_dim)
                .map_err(|_| bad("attention.key_length", &head_dim, "too large"))?,
        };
        if n_rot % 2 != 0 || u64::from(n_rot) > head_dim {
            return Err(bad(
                "rope.dimension_count",
                &n_rot,
                "must be even and at most the head dimension",
            ));
        }
        let rope_freq_scale = match f.get(&key("rope.scaling.type")) {
            None => 1.0,
            Some(_) => match f.get_str(&key("rope.scaling.type"))? {
                "none" => 1.0,
                "linear" => {
                    let factor = f.get_f32(&key("rope.scaling.factor"))?;
                    if factor.is_nan() || factor <= 0.0 {
                        return Err(bad("rope.scaling.factor", &factor, "must be positive"));
                    }
                    1.0 / factor
                }
                other => return Err(bad("rope.scaling.type", &other, "is not supported")),
            },
        };
        let emb = f
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        Ok(Hparams {
            n_vocab: emb.shape().get(1).copied().unwrap_or(0),
            n_embd,
            n_layer: f.get_u32(&key("block_count"))?,
            n_ff: f.get_u64(&key("feed_forward_length"))?,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_base: f
                .get(&key("rope.freq_base"))
                .map_or(Ok(10_000.0), |_| f.get_f32(&key("rope.freq_base")))?,
            rope_freq_scale,
            rms_eps: f.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            n_ctx_train: f.get_u64(&key("context_length"))?,
            tied_output: f.tensor("output.weight").is_none(),
        })
    }

    /// RoPE over the first `n_rot` dims of each head, without YaRN.
    pub(crate) fn rope(&self, mode: RopeMode, freq_base: f32, freq_scale: f32) -> RopeParams {
        RopeParams {
            n_ctx_orig: u32::try_from(self.n_ctx_train).unwrap_or(u32::MAX),
            freq_base,
            freq_scale,
            ..RopeParams::new(mode, self.n_rot)
        }
    }
}

/// A mixture-of-experts feed-forward: per token, `n_expert_used` of `n_expert` SwiGLU experts
/// (`ffn_{gate,up,down}_exps`, `n_ff_exp` wide), picked by the softmax of a router
/// (`ffn_gate_inp`), their outputs summed with the router's probabilities as weights, which with
/// `norm_weights` are first divided by their sum (llama.cpp's `build_moe_ffn` with softmax
/// gating).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeParams {
    pub n_expert: u64,
    pub n_expert_used: u64,
    pub n_ff_exp: u64,
    pub norm_weights: bool,
}

impl MoeParams {
    /// Reads `<arch>.expert_count`, `expert_used_count` and `expert_feed_forward_length`.
    pub fn from_gguf(f: &GgufFile, norm_weights: bool) -> Result<MoeParams, ModelError> {
        let arch = f.architecture()?.to_string();
        let get = |k: &str| f.get_u64(&format!("{arch}.{k}"));
        let m = MoeParams {
            n_expert: get("expert_count")?,
            n_expert_used: get("expert_used_count")?,
            n_ff_exp: get("expert_feed_forward_length")?,
            norm_weights,
        };
        // The router's top-k runs on the device, which picks at most GPU_TOP_K a row.
        let most = m.n_expert.min(GPU_TOP_K as u64);
        if m.n_expert_used == 0 || m.n_expert_used > most {
            return Err(ModelError::BadMetadata {
                key: format!("{arch}.expert_used_count"),
                value: m.n_expert_used.to_string(),
                why: format!("must be in 1..={most} (expert_count {})", m.n_expert),
            });
        }
        Ok(m)
    }
}

/// How one layer's self-attention is built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnSpec {
    pub rope: RopeParams,
    /// Multiplies `q·k` before the softmax.
    pub scale: f32,
    /// `attn_{q,k,v}.bias` are added after the projections (Qwen2).
    pub qkv_bias: bool,
    /// Q and K are RMS-normed per head by `attn_{q,k}_norm` before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
}

/// `blk.{il}.{name}.weight`.
pub(crate) fn blk(il: u32, name: &str) -> String {
    format!("blk.{il}.{name}.weight")
}

/// RMSNorm over dim 0 of `x` times the weight `name` (`[x.ne0]`).
pub(crate) fn rms_norm_by(
    g: &mut Graph,
    f: &GgufFile,
    x: TensorId,
    name: &str,
    eps: f32,
) -> Result<TensorId, ModelError> {
    let w = weight(g, f, name, &[g.ne(x)[0]])?;
    let h = g.rms_norm(x, eps)?;
    Ok(g.mul(h, w)?)
}

/// `blk.{il}.{name}` applied to `x` (`[n_in, n]` → `[n_out, n]`), plus its bias if `bias`.
pub(crate) fn block_linear(
    g: &mut Graph,
    f: &GgufFile,
    il: u32,
    name: &str,
    x: TensorId,
    n_out: u64,
    bias: bool,
) -> Result<TensorId, ModelError> {
    let w = weight(g, f, &blk(il, name), &[g.ne(x)[0], n_out])?;
    let y = g.mul_mat(w, x)?;
    if !bias {
        return Ok(y);
    }
    let b = weight(g, f, &format!("blk.{il}.{name}.bias"), &[n_out])?;
    Ok(g.add(y, b)?)
}

/// Gated feed-forward of layer `il`: `ffn_down(act(ffn_gate·h) · ffn_up·h)`.
pub(crate) fn gated_ffn(
    g: &mut Graph,
    f: &GgufFile,
    hp: &Hparams,
    il: u32,
    h: TensorId,
    act: GluOp,
) -> Result<TensorId, ModelError> {
    let gate = block_linear(g, f, il, "ffn_gate", h, hp.n_ff, false)?;
    let up = block_linear(g, f, il, "ffn_up", h, hp.n_ff, false)?;
    let x = g.glu_split(gate, up, act)?;
    block_linear(g, f, il, "ffn_down", x, hp.n_embd, false)
}

/// One step graph under construction: the graph, its inputs, and what the blocks read.
pub(crate) struct Builder<'a> {
    pub g: Graph,
    f: &'a GgufFile,
    hp: &'a Hparams,
    s: StepShape,
    tokens: TensorId,
    positions: TensorId,
    kv_slots: TensorId,
    /// Causal mask.
    pub mask: TensorId,
    /// Sliding-window mask, when the model has local layers.
    pub mask_swa: Option<SwaMask>,
    out_rows: TensorId,
    /// Bytes of one KV cache row (`head_dim · n_head_kv` values).
    kv_row_bytes: u64,
    /// RoPE's per-pair frequency divisors (`rope_freqs.weight`: Llama 3's scaling), if any.
    freq_factors: Option<TensorId>,
}

/// `rope_freqs.weight` of `f` (`[n_rot / 2]`), when the file has it: RoPE divides each pair's
/// frequency by its factor (Llama 3's long-context scaling).
pub(crate) fn freq_factors(
    g: &mut Graph,
    f: &GgufFile,
    hp: &Hparams,
) -> Result<Option<TensorId>, ModelError> {
    const NAME: &str = "rope_freqs.weight";
    match f.tensor(NAME) {
        None => Ok(None),
        Some(_) => Ok(Some(weight(g, f, NAME, &[u64::from(hp.n_rot) / 2])?)),
    }
}

impl<'a> Builder<'a> {
    /// Starts a step graph with its inputs; `window` adds the sliding-window mask.
    pub fn new(
        f: &'a GgufFile,
        hp: &'a Hparams,
        s: StepShape,
        window: Option<u32>,
    ) -> Result<Builder<'a>, ModelError> {
        let mut g = Graph::new();
        let n = u64::from(s.n_tokens);
        if s.n_kv == 0 || u64::from(s.kv_first) + u64::from(s.n_kv) > u64::from(s.n_ctx) {
            return Err(ModelError::BadSession(format!(
                "a step attending {} cache rows from row {} of {}",
                s.n_kv, s.kv_first, s.n_ctx
            )));
        }
        let n_kv = u64::from(s.n_kv);
        let kv_row = hp.head_dim * hp.n_head_kv;
        let kv_row_bytes = s
            .kv_dtype
            .row_bytes(kv_row)
            .ok_or_else(|| ModelError::BadMetadata {
                key: "kv cache dtype".into(),
                value: s.kv_dtype.to_string(),
                why: format!("a KV row of {kv_row} values is not whole blocks"),
            })?;
        let tokens = g.input("tokens", DType::I32, [n, 1, 1, 1])?;
        let positions = g.input("positions", DType::I32, [n, 1, 1, 1])?;
        let kv_slots = g.input("kv_slots", DType::I64, [n, 1, 1, 1])?;
        let mask = g.input("mask", DType::F32, [n_kv, n, 1, 1])?;
        let mask_swa = match window {
            Some(window) => Some(SwaMask {
                mask: g.input("mask_swa", DType::F32, [n_kv, n, 1, 1])?,
                window,
            }),
            None => None,
        };
        let out_rows = g.input("out_rows", DType::I32, [u64::from(s.n_outputs), 1, 1, 1])?;
        let freq_factors = freq_factors(&mut g, f, hp)?;
        Ok(Builder {
            g,
            f,
            hp,
            s,
            tokens,
            positions,
            kv_slots,
            mask,
            mask_swa,
            out_rows,
            kv_row_bytes,
            freq_factors,
        })
    }

    /// The weight `name`, checked to have extents `want`.
    pub fn weight(&mut self, name: &str, want: &[u64]) -> Result<TensorId, ModelError> {
        weight(&mut self.g, self.f, name, want)
    }

    /// The token embedding table and the embedded tokens `[n_embd, n_tokens]`.
    pub fn embed(&mut self) -> Result<(TensorId, TensorId), ModelError> {
        let table = self.weight("token_embd.weight", &[self.hp.n_embd, self.hp.n_vocab])?;
        let x = self.g.get_rows(table, self.tokens)?;
        Ok((table, x))
    }

    /// RMSNorm over dim 0 of `x` times the weight `name` (`[x.ne0]`).
    pub fn norm(&mut self, x: TensorId, name: &str) -> Result<TensorId, ModelError> {
        rms_norm_by(&mut self.g, self.f, x, name, self.hp.rms_eps)
    }

    /// `blk.{il}.{name}` applied to `x` (`[n_in, n]` → `[n_out, n]`), plus its bias if `bias`.
    fn linear(
        &mut self,
        il: u32,
        name: &str,
        x: TensorId,
        n_out: u64,
        bias: bool,
    ) -> Result<TensorId, ModelError> {
        block_linear(&mut self.g, self.f, il, name, x, n_out, bias)
    }

    /// Self-attention of layer `il` over the normed input `h` `[n_embd, n]`, through the output
    /// projection. This step's K/V rows are written into the `State` caches `cache_k.{il}` /
    /// `cache_v.{il}` (`[head_dim·n_head_kv, n_ctx]`) at `kv_slots`, then the queries attend over
    /// the cache's `n_kv` rows from `kv_first` under `mask`.
    pub fn attention(
        &mut self,
        il: u32,
        h: TensorId,
        a: &AttnSpec,
        mask: TensorId,
    ) -> Result<TensorId, ModelError> {
        let (hd, nh, nkv) = (self.hp.head_dim, self.hp.n_head, self.hp.n_head_kv);
        let n = u64::from(self.s.n_tokens);
        let ctx = u64::from(self.s.n_ctx);
        let n_kv = u64::from(self.s.n_kv);
        let kv_row = hd * nkv;
        let q = self.linear(il, "attn_q", h, hd * nh, a.qkv_bias)?;
        let k = self.linear(il, "attn_k", h, kv_row, a.qkv_bias)?;
        let v = self.linear(il, "attn_v", h, kv_row, a.qkv_bias)?;
        let mut q = self.g.reshape(q, [hd, nh, n, 1])?;
        let mut k = self.g.reshape(k, [hd, nkv, n, 1])?;
        if a.qk_norm {
            q = self.norm(q, &blk(il, "attn_q_norm"))?;
            k = self.norm(k, &blk(il, "attn_k_norm"))?;
        }
        let q = self.g.rope(q, self.positions, self.freq_factors, a.rope)?;
        let k = self.g.rope(k, self.positions, self.freq_factors, a.rope)?;

        let dt = self.s.kv_dtype;
        let cache_k = self
            .g
            .state(&format!("cache_k.{il}"), dt, [kv_row, ctx, 1, 1])?;
        let cache_v = self
            .g
            .state(&format!("cache_v.{il}"), dt, [kv_row, ctx, 1, 1])?;
        let k = self.g.reshape(k, [kv_row, n, 1, 1])?;
        let ck = self.g.set_rows(cache_k, k, self.kv_slots)?;
        let cv = self.g.set_rows(cache_v, v, self.kv_slots)?;
        let row = self.kv_row_bytes;
        let nb = [dt.type_size() as u64, row, row / nkv, row * ctx];
        let first = u64::from(self.s.kv_first) * row;
        let kview = self.g.view(ck, [hd, n_kv, nkv, 1], nb, first)?;
        let vview = self.g.view(cv, [hd, n_kv, nkv, 1], nb, first)?;
        let qp = self.g.permute(q, [0, 2, 1, 3])?;
        let att = self
            .g
            .flash_attn_ext(qp, kview, vview, Some(mask), None, a.scale, 0.0, 0.0)?;
        let att = self.g.reshape(att, [hd * nh, n, 1, 1])?;
        self.linear(il, "attn_output", att, self.hp.n_embd, false)
    }

    /// Gated feed-forward of layer `il`: `ffn_down(act(ffn_gate·h) · ffn_up·h)`.
    pub fn ffn(&mut self, il: u32, h: TensorId, act: GluOp) -> Result<TensorId, ModelError> {
        gated_ffn(&mut self.g, self.f, self.hp, il, h, act)
    }

    /// The mixture-of-experts feed-forward of layer `il` over the normed input `h`
    /// `[n_embd, n]` (see [`MoeParams`]).
    pub fn moe_ffn(&mut self, il: u32, h: TensorId, m: &MoeParams) -> Result<TensorId, ModelError> {
        let (e, n) = (self.hp.n_embd, self.g.ne(h)[1]);
        let (ne, nu, nf) = (m.n_expert, m.n_expert_used, m.n_ff_exp);
        let router = self.weight(&blk(il, "ffn_gate_inp"), &[e, ne])?;
        let logits = self.g.mul_mat(router, h)?;
        let probs = self.g.soft_max(logits, None, None, 1.0, 0.0)?;
        // [nu, n] expert ids, most probable first, ties to the lower id.
        let picked = self.g.top_k(probs, nu as u32)?;
        let probs = self.g.reshape(probs, [1, ne, n, 1])?;
        let mut weights = self.g.get_rows(probs, picked)?;
        if m.norm_weights {
            let w = self.g.reshape(weights, [nu, n, 1, 1])?;
            let sum = self.g.sum_rows(w)?;
            let w = self.g.binary(w, sum, BinaryOp::Div)?;
            weights = self.g.reshape(w, [1, nu, n, 1])?;
        }
        let x = self.g.reshape(h, [e, 1, n, 1])?;
        let gate_w = self.weight(&blk(il, "ffn_gate_exps"), &[e, nf, ne])?;
        let up_w = self.weight(&blk(il, "ffn_up_exps"), &[e, nf, ne])?;
        let down_w = self.weight(&blk(il, "ffn_down_exps"), &[nf, e, ne])?;
        let gate = self.g.mul_mat_id(gate_w, x, picked)?;
        let up = self.g.mul_mat_id(up_w, x, picked)?;
        let act = self.g.glu_split(gate, up, GluOp::Swiglu)?;
        let experts = self.g.mul_mat_id(down_w, act, picked)?;
        // [e, nu, n] weighted, then summed over the nu experts of each token.
        let experts = self.g.mul(experts, weights)?;
        let nb = self.g.node(experts).layout.nb;
        let slot = |g: &mut Graph, i: u64| {
            g.view(
                experts,
                [e, n, 1, 1],
                [nb[0], nb[2], nb[3], nb[3]],
                i * nb[1],
            )
        };
        let mut out = slot(&mut self.g, 0)?;
        for i in 1..nu {
            let v = slot(&mut self.g, i)?;
            out = self.g.add(out, v)?;
        }
        Ok(out)
    }

    /// Final norm and output matrix over the `out_rows` tokens of `x` only (the output matrix
    /// is large); `tok_embd` is the output matrix when the model ties them. Then, when the
    /// shape asks for it, the output head: each row's argmax and top-k ids with their logits,
    /// so a session reads back a few bytes per row instead of `n_vocab` logits.
    pub fn finish(mut self, x: TensorId, tok_embd: TensorId) -> Result<StepGraph, ModelError> {
        // A one-token step's only row is its output row: nothing to select.
        let x = match self.s.n_tokens {
            1 => x,
            _ => self.g.get_rows(x, self.out_rows)?,
        };
        let x = self.norm(x, "output_norm.weight")?;
        let out_w = if self.hp.tied_output {
            tok_embd
        } else {
            self.weight("output.weight", &[self.hp.n_embd, self.hp.n_vocab])?
        };
        let logits = self.g.mul_mat(out_w, x)?;
        self.g.set_name(logits, "logits");
        self.g.mark_output(logits)?;
        let head = match self.s.head {
            true => Some(self.head(logits)?),
            false => None,
        };
        Ok(StepGraph {
            graph: self.g,
            shape: self.s,
            tokens: self.tokens,
            positions: self.positions,
            kv_slots: self.kv_slots,
            mask: self.mask,
            mask_swa: self.mask_swa,
            out_rows: self.out_rows,
            logits,
            head,
        })
    }

    /// Each row's argmax and top-k candidates of `logits`, on the backend.
    fn head(&mut self, logits: TensorId) -> Result<Head, ModelError> {
        let n_out = u64::from(self.s.n_outputs);
        let k = GPU_TOP_K.min(self.hp.n_vocab as usize) as u32;
        let top_ids = self.g.top_k(logits, k)?;
        self.g.mark_output(top_ids)?;
        // Each row's argmax is its first candidate (largest first, ties to the lower id).
        let row = 4 * u64::from(k);
        let argmax = self.g.view(
            top_ids,
            [1, n_out, 1, 1],
            [4, row, row * n_out, row * n_out],
            0,
        )?;
        self.g.mark_output(argmax)?;
        // One logit per row of the table: row `id` of matrix `r` is logit `id` of output `r`.
        let flat = self.g.reshape(logits, [1, self.hp.n_vocab, n_out, 1])?;
        let top_vals = self.g.get_rows(flat, top_ids)?;
        self.g.mark_output(top_vals)?;
        Ok(Head {
            argmax,
            top_ids,
            top_vals,
        })
    }
}

/// What distinguishes the plain pre-norm decoders from each other.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Flavor {
    pub rope_mode: RopeMode,
    pub qkv_bias: bool,
    pub qk_norm: bool,
}

/// A pre-norm decoder: embeddings → `n_layer` × (`x += attn(norm(x))`, `x += swiglu_ffn(norm(x))`)
/// → norm → logits, with causal attention scaled by `1/sqrt(head_dim)`.
pub(crate) fn build_prenorm_decoder(
    hp: &Hparams,
    f: &GgufFile,
    s: StepShape,
    fl: Flavor,
) -> Result<StepGraph, ModelError> {
    build_decoder(hp, f, s, fl, None)
}

/// [`build_prenorm_decoder`], with a mixture-of-experts feed-forward in every layer when `moe`
/// is given.
pub(crate) fn build_decoder(
    hp: &Hparams,
    f: &GgufFile,
    s: StepShape,
    fl: Flavor,
    moe: Option<&MoeParams>,
) -> Result<StepGraph, ModelError> {
    let mut b = Builder::new(f, hp, s, None)?;
    let spec = AttnSpec {
        rope: hp.rope(fl.rope_mode, hp.rope_base, hp.rope_freq_scale),
        scale: 1.0 / (hp.head_dim as f32).sqrt(),
        qkv_bias: fl.qkv_bias,
        qk_norm: fl.qk_norm,
    };
    let (tok_embd, mut x) = b.embed()?;
    for il in 0..hp.n_layer {
        let h = b.norm(x, &blk(il, "attn_norm"))?;
        let mask = b.mask;
        let a = b.attention(il, h, &spec, mask)?;
        x = b.g.add(a, x)?;
        let h = b.norm(x, &blk(il, "ffn_norm"))?;
        let m = match moe {
            Some(p) => b.moe_ffn(il, h, p)?,
            None => b.ffn(il, h, GluOp::Swiglu)?,
        };
        x = b.g.add(m, x)?;
    }
    b.finish(x, tok_embd)
}
