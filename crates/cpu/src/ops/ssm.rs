//! Sequence-model ops: ssm_conv, ssm_scan (Mamba-1 and Mamba-2), gated_delta_net; mirrors
//! ggml-cpu's `ggml_compute_forward_ssm_conv/ssm_scan/gated_delta_net`.

use rayon::prelude::*;
use wgllm_core::{Error, Result};

use super::matmul::dot;
use crate::Ctx;

/// ggml_softplus: `log(1 + e^x)`, exactly `x` above 20.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// ggml_ssm_conv: `r[c, t, s] = Σ_j conv_x[t + j, c, s] · conv_w[j, c]`.
pub(crate) fn ssm_conv(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.dense(0)?;
    let w = ctx.dense(1)?;
    let [d_inner, n_t, n_s, _] = ctx.out_ne();
    let d_conv = w.ne[0];
    let mut out = vec![0f32; d_inner * n_t * n_s];
    for s in 0..n_s {
        for t in 0..n_t {
            for c in 0..d_inner {
                let xr = &x.row(c, s, 0)[t..t + d_conv];
                out[(s * n_t + t) * d_inner + c] = dot(xr, w.row(c, 0, 0));
            }
        }
    }
    ctx.write(&out)
}

/// ggml_ssm_scan: per sequence, starting from state `ids[seq]`, for every token and head:
/// `dt' = softplus(dt)`, `state = state·exp(dt'·A) + B·(x·dt')`, `y = state·C` (dot over
/// d_state). Writes `y` then the final states; see `Graph::ssm_scan`.
pub(crate) fn ssm_scan(ctx: &mut Ctx) -> Result<()> {
    let s0 = ctx.dense(0)?;
    let x = ctx.dense(1)?;
    let dt = ctx.dense(2)?;
    let a = ctx.dense(3)?;
    let b = ctx.dense(4)?;
    let c = ctx.dense(5)?;
    let ids = ctx.ints(6)?;
    let [d_state, head_dim, n_head, n_rs] = s0.ne;
    let [_, _, n_tokens, n_seqs] = x.ne;
    let n_group = b.ne[1];
    let heads_per_group = n_head / n_group;
    let state_len = d_state * head_dim * n_head;
    let mut y = vec![0f32; x.data.len()];
    let mut states = vec![0f32; state_len * n_seqs];
    for (seq, &id) in ids.iter().enumerate() {
        let src = usize::try_from(id)
            .ok()
            .filter(|&r| r < n_rs)
            .ok_or_else(|| {
                Error::shape(format!(
                    "ssm_scan: state id {id} of sequence {seq} out of range 0..{n_rs}"
                ))
            })?;
        let st = &mut states[seq * state_len..(seq + 1) * state_len];
        st.copy_from_slice(&s0.data[src * state_len..(src + 1) * state_len]);
        for t in 0..n_tokens {
            for h in 0..n_head {
                let dtp = softplus(dt.at(h, t, seq, 0));
                let g = h / heads_per_group;
                let (brow, crow) = (b.row(g, t, seq), c.row(g, t, seq));
                let arow = a.row(h, 0, 0);
                for i in 0..head_dim {
                    let x_dt = x.at(i, h, t, seq) * dtp;
                    let srow = &mut st[(h * head_dim + i) * d_state..][..d_state];
                    let mut acc = 0f32;
                    for (j, sv) in srow.iter_mut().enumerate() {
                        // Mamba-2 has one decay per head, Mamba-1 one per state.
                        let decay = (dtp * arow[if arow.len() == 1 { 0 } else { j }]).exp();
                        *sv = *sv * decay + brow[j] * x_dt;
                        acc += *sv * crow[j];
                    }
                    y[x.idx(i, h, t, seq)] = acc;
                }
            }
        }
    }
    y.extend_from_slice(&states);
    ctx.write(&y)
}

/// ggml_gated_delta_net: per (value head, sequence), over tokens, with `M` the state (key index
/// first): `M[i][:] *= exp(g_i)`, `delta = (v - Mᵀk)·beta`, `M += k ⊗ delta`,
/// `o = Mᵀq / sqrt(S)`. Writes the outputs then the final states; see `Graph::gated_delta_net`.
pub(crate) fn gated_delta_net(ctx: &mut Ctx) -> Result<()> {
    let q = ctx.dense(0)?;
    let k = ctx.dense(1)?;
    let v = ctx.dense(2)?;
    let g = ctx.dense(3)?;
    let beta = ctx.dense(4)?;
    let state = ctx.dense(5)?;
    let [s, n_head, n_tokens, n_seqs] = v.ne;
    let per_elem_gate = g.ne[0] == s;
    // One task per (head, sequence): its outputs for every token and its final state.
    let results: Vec<(Vec<f32>, Vec<f32>)> = (0..n_seqs * n_head)
        .into_par_iter()
        .map(|task| {
            let (h, seq) = (task % n_head, task / n_head);
            let (hq, hk) = (h % q.ne[1], h % k.ne[1]);
            let (sq, sk) = (seq / (n_seqs / q.ne[3]), seq / (n_seqs / k.ne[3]));
            // m[j * s + i] = M[i][j]: row j of `m` is column j of M.
            let mut m = state.data[task * s * s..(task + 1) * s * s].to_vec();
            let mut outs = Vec::with_capacity(n_tokens * s);
            let mut delta = vec![0f32; s];
            for t in 0..n_tokens {
                let (qr, kr, vr) = (q.row(hq, t, sq), k.row(hk, t, sk), v.row(h, t, seq));
                let gr = g.row(h, t, seq);
                if per_elem_gate {
                    let decay: Vec<f32> = gr.iter().map(|x| x.exp()).collect();
                    for row in m.chunks_exact_mut(s) {
                        row.iter_mut().zip(&decay).for_each(|(x, d)| *x *= d);
                    }
                } else {
                    let decay = gr[0].exp();
                    m.iter_mut().for_each(|x| *x *= decay);
                }
                let b = beta.at(0, h, t, seq);
                for (j, row) in m.chunks_exact(s).enumerate() {
                    delta[j] = (vr[j] - dot(row, kr)) * b;
                }
                for (row, &dj) in m.chunks_exact_mut(s).zip(&delta) {
                    row.iter_mut().zip(kr).for_each(|(x, &ki)| *x += ki * dj);
                }
                let scale = 1.0 / (s as f32).sqrt();
                outs.extend(m.chunks_exact(s).map(|row| dot(row, qr) * scale));
            }
            (outs, m)
        })
        .collect();
    let mut out = vec![0f32; s * n_head * (n_tokens * n_seqs + s * n_seqs)];
    let states_at = s * n_head * n_tokens * n_seqs;
    for (task, (outs, m)) in results.iter().enumerate() {
        let (h, seq) = (task % n_head, task / n_head);
        for t in 0..n_tokens {
            let dst = ((seq * n_tokens + t) * n_head + h) * s;
            out[dst..dst + s].copy_from_slice(&outs[t * s..(t + 1) * s]);
        }
        out[states_at + task * s * s..states_at + (task + 1) * s * s].copy_from_slice(m);
    }
    ctx.write(&out)
}
