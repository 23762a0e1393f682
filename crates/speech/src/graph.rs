//! Whisper as graphs (<https://arxiv.org/abs/2212.04356>), built as whisper.cpp builds them.
//!
//! The encoder graph takes one 30 s window of log-mel frames: two 1-D convolutions (the second
//! of stride 2) with GELU, sinusoidal positions, `n_audio_layer` pre-norm blocks, a final norm;
//! then each decoder layer's cross-attention keys and values of the window are written into the
//! `State`s `cross_k.{il}` / `cross_v.{il}`, computed once per window. A decoder graph runs
//! `n_tokens` tokens: pre-norm blocks of causal self-attention over the `State` caches
//! `self_k.{il}` / `self_v.{il}`, cross-attention over the window, a GELU MLP, then the final
//! norm and the logits of one row (the embedding table is the output matrix).

use wgllm_core::op::UnaryOp;
use wgllm_core::{DType, Graph, TensorId};
use wgllm_gguf::GgufFile;
use wgllm_models::arch::weight;

use crate::error::SpeechError;
use crate::model::WhisperConfig;

/// LayerNorm epsilon (PyTorch's default, as Whisper uses).
const EPS: f32 = 1e-5;
/// dtype of the self- and cross-attention caches where the backend has f16 (whisper.cpp's).
pub const CACHE_DTYPE: DType = DType::F16;

/// The encoder graph and its handles.
pub struct EncoderGraph {
    pub graph: Graph,
    /// F32 `[2 · n_audio_ctx, n_mels]` log-mel frames, time innermost.
    pub mel: TensorId,
    /// F32 `[n_audio_state, n_audio_ctx]` encoder states (an output, for tests).
    pub states: TensorId,
}

/// A decoder graph of one batch size and its handles.
pub struct DecoderGraph {
    pub graph: Graph,
    pub n_tokens: u32,
    /// I32 `[n_tokens]` token ids.
    pub tokens: TensorId,
    /// I32 `[n_tokens]` positions, which are also the cache rows written.
    pub positions: TensorId,
    /// I64 `[n_tokens]` the cache rows written (the positions).
    pub kv_slots: TensorId,
    /// F32 `[n_text_ctx, n_tokens]`: 0 where a token sees a cache row, -inf elsewhere.
    pub mask: TensorId,
    /// I32 `[1]`: the row whose logits are made.
    pub out_row: TensorId,
    /// F32 `[n_vocab]` logits.
    pub logits: TensorId,
}

struct B<'a> {
    g: Graph,
    f: &'a GgufFile,
}

impl B<'_> {
    fn w(&mut self, name: &str, want: &[u64]) -> Result<TensorId, SpeechError> {
        Ok(weight(&mut self.g, self.f, name, want)?)
    }

    /// LayerNorm over dim 0 with `{name}.weight` / `{name}.bias`.
    fn norm(&mut self, x: TensorId, name: &str) -> Result<TensorId, SpeechError> {
        let e = self.g.ne(x)[0];
        let w = self.w(&format!("{name}.weight"), &[e])?;
        let b = self.w(&format!("{name}.bias"), &[e])?;
        let h = self.g.norm(x, EPS)?;
        let h = self.g.mul(h, w)?;
        Ok(self.g.add(h, b)?)
    }

    /// `{name}.weight · x` plus `{name}.bias` when `bias`.
    fn linear(
        &mut self,
        x: TensorId,
        name: &str,
        n_out: u64,
        bias: bool,
    ) -> Result<TensorId, SpeechError> {
        let w = self.w(&format!("{name}.weight"), &[self.g.ne(x)[0], n_out])?;
        let y = self.g.mul_mat(w, x)?;
        if !bias {
            return Ok(y);
        }
        let b = self.w(&format!("{name}.bias"), &[n_out])?;
        Ok(self.g.add(y, b)?)
    }

    /// The 1-D convolution `{name}` (kernel 3, padding 1) of `x` `[time, channels]`, plus its
    /// bias, then GELU: `[n_out, time / stride]`.
    fn conv(
        &mut self,
        x: TensorId,
        name: &str,
        n_out: u64,
        stride: u32,
    ) -> Result<TensorId, SpeechError> {
        let c = self.g.ne(x)[1];
        let k = self.w(&format!("{name}.weight"), &[3, c, n_out])?;
        let cols = self
            .g
            .im2col(k, x, [stride, 1], [1, 0], [1, 1], false, DType::F32)?;
        let k2 = self.g.reshape(k, [3 * c, n_out, 1, 1])?;
        let t = self.g.ne(cols)[1];
        let cols = self.g.reshape(cols, [3 * c, t, 1, 1])?;
        let y = self.g.mul_mat(k2, cols)?;
        let b = self.w(&format!("{name}.bias"), &[n_out])?;
        let y = self.g.add(y, b)?;
        Ok(self.g.unary(y, UnaryOp::Gelu)?)
    }

    /// Multi-head attention of queries `q` `[e, n]` over keys `k` and values `v` given as
    /// `[hd, n_kv, heads]` views, under `mask`: `[e, n]`.
    fn attend(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        n_head: u64,
    ) -> Result<TensorId, SpeechError> {
        let [e, n, ..] = self.g.ne(q);
        let hd = e / n_head;
        let q = self.g.reshape(q, [hd, n_head, n, 1])?;
        let q = self.g.permute(q, [0, 2, 1, 3])?;
        let scale = 1.0 / (hd as f32).sqrt();
        let att = self
            .g
            .flash_attn_ext(q, k, v, mask, None, scale, 0.0, 0.0)?;
        Ok(self.g.reshape(att, [e, n, 1, 1])?)
    }

    /// `[hd, rows, heads]` view of the first `rows` rows of a `[e, *]` cache.
    fn heads(&mut self, cache: TensorId, rows: u64, n_head: u64) -> Result<TensorId, SpeechError> {
        let n = self.g.node(cache);
        let (dt, e, total) = (n.dtype, n.layout.ne[0], n.layout.ne[1]);
        let ts = dt.type_size() as u64;
        let row = e * ts;
        let hd = e / n_head;
        Ok(self.g.view(
            cache,
            [hd, rows, n_head, 1],
            [ts, row, hd * ts, row * total],
            0,
        )?)
    }
}

/// Builds the encoder graph, its cross-attention caches in `cache`.
pub fn build_encoder(
    c: &WhisperConfig,
    f: &GgufFile,
    cache: DType,
) -> Result<EncoderGraph, SpeechError> {
    let mut b = B { g: Graph::new(), f };
    let (e, ctx) = (c.n_audio_state, c.n_audio_ctx);
    let mel = b.g.input("mel", DType::F32, [2 * ctx, c.n_mels, 1, 1])?;
    let x = b.conv(mel, "encoder.conv1", e, 1)?;
    let x = b.g.transpose(x)?;
    let x = b.g.cont(x, DType::F32)?;
    let x = b.conv(x, "encoder.conv2", e, 2)?;
    let pe = b.w("encoder.positional_embedding", &[e, ctx])?;
    let mut x = b.g.add(x, pe)?;
    for il in 0..c.n_audio_layer {
        let p = format!("encoder.blocks.{il}");
        let h = b.norm(x, &format!("{p}.attn_ln"))?;
        let q = b.linear(h, &format!("{p}.attn.query"), e, true)?;
        let k = b.linear(h, &format!("{p}.attn.key"), e, false)?;
        let v = b.linear(h, &format!("{p}.attn.value"), e, true)?;
        let hd = e / c.n_audio_head;
        let split = |b: &mut B, t: TensorId| -> Result<TensorId, SpeechError> {
            let t = b.g.reshape(t, [hd, c.n_audio_head, ctx, 1])?;
            Ok(b.g.permute(t, [0, 2, 1, 3])?)
        };
        let (k, v) = (split(&mut b, k)?, split(&mut b, v)?);
        let att = b.attend(q, k, v, None, c.n_audio_head)?;
        let att = b.linear(att, &format!("{p}.attn.out"), e, true)?;
        x = b.g.add(x, att)?;
        let h = b.norm(x, &format!("{p}.mlp_ln"))?;
        let h = b.linear(h, &format!("{p}.mlp.0"), 4 * e, true)?;
        let h = b.g.unary(h, UnaryOp::Gelu)?;
        let h = b.linear(h, &format!("{p}.mlp.2"), e, true)?;
        x = b.g.add(x, h)?;
    }
    let states = b.norm(x, "encoder.ln_post")?;
    b.g.set_name(states, "encoder_states");
    b.g.mark_output(states)?;
    // Each decoder layer's cross-attention keys and values of this window.
    for il in 0..c.n_text_layer {
        let p = format!("decoder.blocks.{il}.cross_attn");
        let k = b.linear(states, &format!("{p}.key"), e, false)?;
        let v = b.linear(states, &format!("{p}.value"), e, true)?;
        let ck = b.g.state(&format!("cross_k.{il}"), cache, [e, ctx, 1, 1])?;
        let cv = b.g.state(&format!("cross_v.{il}"), cache, [e, ctx, 1, 1])?;
        b.g.cpy(k, ck)?;
        b.g.cpy(v, cv)?;
    }
    Ok(EncoderGraph {
        graph: b.g,
        mel,
        states,
    })
}

/// Builds the decoder graph of `n_tokens` tokens a run, its caches in `cache`.
pub fn build_decoder(
    c: &WhisperConfig,
    f: &GgufFile,
    n_tokens: u32,
    cache: DType,
) -> Result<DecoderGraph, SpeechError> {
    if n_tokens == 0 || u64::from(n_tokens) > c.n_text_ctx {
        return Err(SpeechError::Unsupported(format!(
            "a decoder run of {n_tokens} tokens (the model has {} positions)",
            c.n_text_ctx
        )));
    }
    let mut b = B { g: Graph::new(), f };
    let (e, ctx, actx) = (c.n_text_state, c.n_text_ctx, c.n_audio_ctx);
    let n = u64::from(n_tokens);
    let tokens = b.g.input("tokens", DType::I32, [n, 1, 1, 1])?;
    let positions = b.g.input("positions", DType::I32, [n, 1, 1, 1])?;
    let kv_slots = b.g.input("kv_slots", DType::I64, [n, 1, 1, 1])?;
    let mask = b.g.input("mask", DType::F32, [ctx, n, 1, 1])?;
    let out_row = b.g.input("out_row", DType::I32, [1, 1, 1, 1])?;

    let table = b.w("decoder.token_embedding.weight", &[e, c.n_vocab])?;
    let x = b.g.get_rows(table, tokens)?;
    let pe = b.w("decoder.positional_embedding", &[e, ctx])?;
    let p = b.g.get_rows(pe, positions)?;
    let mut x = b.g.add(x, p)?;
    for il in 0..c.n_text_layer {
        let p = format!("decoder.blocks.{il}");
        let h = b.norm(x, &format!("{p}.attn_ln"))?;
        let q = b.linear(h, &format!("{p}.attn.query"), e, true)?;
        let k = b.linear(h, &format!("{p}.attn.key"), e, false)?;
        let v = b.linear(h, &format!("{p}.attn.value"), e, true)?;
        let sk = b.g.state(&format!("self_k.{il}"), cache, [e, ctx, 1, 1])?;
        let sv = b.g.state(&format!("self_v.{il}"), cache, [e, ctx, 1, 1])?;
        let sk = b.g.set_rows(sk, k, kv_slots)?;
        let sv = b.g.set_rows(sv, v, kv_slots)?;
        let (kh, vh) = (
            b.heads(sk, ctx, c.n_text_head)?,
            b.heads(sv, ctx, c.n_text_head)?,
        );
        let att = b.attend(q, kh, vh, Some(mask), c.n_text_head)?;
        let att = b.linear(att, &format!("{p}.attn.out"), e, true)?;
        x = b.g.add(x, att)?;

        let h = b.norm(x, &format!("{p}.cross_attn_ln"))?;
        let q = b.linear(h, &format!("{p}.cross_attn.query"), e, true)?;
        let ck =
            b.g.state(&format!("cross_k.{il}"), cache, [e, actx, 1, 1])?;
        let cv =
            b.g.state(&format!("cross_v.{il}"), cache, [e, actx, 1, 1])?;
        let (kh, vh) = (
            b.heads(ck, actx, c.n_text_head)?,
            b.heads(cv, actx, c.n_text_head)?,
        );
        let att = b.attend(q, kh, vh, None, c.n_text_head)?;
        let att = b.linear(att, &format!("{p}.cross_attn.out"), e, true)?;
        x = b.g.add(x, att)?;

        let h = b.norm(x, &format!("{p}.mlp_ln"))?;
        let h = b.linear(h, &format!("{p}.mlp.0"), 4 * e, true)?;
        let h = b.g.unary(h, UnaryOp::Gelu)?;
        let h = b.linear(h, &format!("{p}.mlp.2"), e, true)?;
        x = b.g.add(x, h)?;
    }
    let x = if n_tokens == 1 {
        x
    } else {
        b.g.get_rows(x, out_row)?
    };
    let x = b.norm(x, "decoder.ln")?;
    let logits = b.g.mul_mat(table, x)?;
    b.g.set_name(logits, "logits");
    b.g.mark_output(logits)?;
    Ok(DecoderGraph {
        graph: b.g,
        n_tokens,
        tokens,
        positions,
        kv_slots,
        mask,
        out_row,
        logits,
    })
}
