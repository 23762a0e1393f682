//! flash_attn_ext (ggml_compute_forward_flash_attn_ext): masked, GQA, ALiBi, logit softcap,
//! sinks; K/V in any dtype the builder accepts.
//!
//! K and V are decoded to dense f32 once per call (memory linear in `n_kv`), then every
//! (query, head, batch) row streams over the keys with an online softmax, in parallel.

use rayon::prelude::*;
use wgllm_core::Result;

use super::matmul::dot;
use crate::Ctx;

/// ALiBi slope of head `h` of `n_head` for `max_bias` (ggml's m0/m1 rule); 1 without ALiBi.
pub fn alibi_slope(h: usize, n_head: usize, max_bias: f32) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = 1usize << (usize::BITS - 1 - n_head.max(1).leading_zeros());
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    if h < n_head_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_head_log2) as i32 + 1)
    }
}

/// `softmax(scale·q·Kᵀ [softcapped] + slope·mask) · V` per query row; see
/// `Graph::flash_attn_ext` for the layouts.
pub(crate) fn flash_attn_ext(ctx: &mut Ctx, scale: f32, max_bias: f32, softcap: f32) -> Result<()> {
    let q = ctx.dense(0)?;
    let k = ctx.dense(1)?;
    let v = ctx.dense(2)?;
    let mask = ctx.opt_dense(3)?;
    let sinks = ctx.opt_dense(4)?;
    let [d, n_q, n_head, batch] = q.ne;
    let (n_kv, dv) = (k.ne[1], v.ne[0]);
    let (rk2, rv2) = (n_head / k.ne[2], n_head / v.ne[2]);
    // ggml folds 1/softcap into the scale and multiplies the tanh by softcap.
    let scale = if softcap != 0.0 {
        scale / softcap
    } else {
        scale
    };

    let rows: Vec<[usize; 3]> = (0..batch)
        .flat_map(|b| (0..n_q).flat_map(move |i| (0..n_head).map(move |h| [i, h, b])))
        .collect();
    let out: Vec<f32> = rows
        .par_iter()
        .flat_map_iter(|&[iq, h, b]| {
            let slope = alibi_slope(h, n_head, max_bias);
            let mrow = mask.as_ref().map(|m| m.row(iq, h % m.ne[2], b % m.ne[3]));
            let qrow = q.row(iq, h, b);
            let mut acc = vec![0f32; dv];
            let (mut sum, mut max) = (0f32, f32::NEG_INFINITY);
            for ic in 0..n_kv {
                let mv = mrow.map_or(0.0, |m| slope * m[ic]);
                if mv == f32::NEG_INFINITY {
                    continue;
                }
                let mut s = dot(&qrow[..d], k.row(ic, h / rk2, b)) * scale;
                if softcap != 0.0 {
                    s = softcap * s.tanh();
                }
                s += mv;
                // Online softmax: rescale what was accumulated when the maximum grows.
                let (ms, vs) = if s > max {
                    let ms = (max - s).exp();
                    max = s;
                    (ms, 1.0)
                } else {
                    (1.0, (s - max).exp())
                };
                for (a, &x) in acc.iter_mut().zip(v.row(ic, h / rv2, b)) {
                    *a = *a * ms + x * vs;
                }
                sum = sum * ms + vs;
            }
            if let Some(sk) = &sinks {
                let s = sk.data[h];
                if s > max {
                    let ms = (max - s).exp();
                    acc.iter_mut().for_each(|a| *a *= ms);
                    sum = sum * ms + 1.0;
                } else {
                    sum += (s - max).exp();
                }
            }
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            acc.into_iter().map(move |a| a * inv)
        })
        .collect();
    ctx.write(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alibi_slopes_follow_ggml() {
        // 8 heads, max_bias 8: m0 = 2^-1, slopes 1/2, 1/4, ... 1/256.
        assert_eq!(alibi_slope(0, 8, 8.0), 0.5);
        assert_eq!(alibi_slope(7, 8, 8.0), 1.0 / 256.0);
        // 6 heads: n_head_log2 = 4, m0 = 2^-2, m1 = 2^-1; head 4 uses m1^1, head 5 m1^3.
        assert_eq!(alibi_slope(3, 6, 8.0), 0.25f32.powi(4));
        assert_eq!(alibi_slope(4, 6, 8.0), 0.5);
        assert_eq!(alibi_slope(5, 6, 8.0), 0.125);
        assert_eq!(alibi_slope(5, 6, 0.0), 1.0);
    }
}
