//! soft_max with scale, mask (f32 or f16, broadcast over heads and batches), ALiBi slopes and
//! attention sinks, as ggml_compute_forward_soft_max_f32.

use wgllm_core::Result;

use crate::Ctx;

/// The ALiBi slope of head `h` among `n_head` (ggml's `m0`/`m1` scheme); 1 when `max_bias <= 0`.
pub(crate) fn alibi_slope(h: usize, n_head: usize, max_bias: f32) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    // The largest power of two not above n_head (1 for an empty or single head).
    let n_head_log2 = if n_head <= 1 {
        1
    } else {
        1usize << n_head.ilog2()
    };
    let (h, n2) = (h as f32, n_head_log2 as f32);
    if (h as usize) < n_head_log2 {
        let m0 = 2f32.powf(-max_bias / n2);
        m0.powf(h + 1.0)
    } else {
        let m1 = 2f32.powf(-(max_bias / 2.0) / n2);
        m1.powf(2.0 * (h - n2) + 1.0)
    }
}

/// ggml_soft_max_ext: each row of `a·scale + slope·mask` exponentiated about its maximum (the
/// head's sink included) and divided by the sum of the exponentials (the sink's included).
pub(crate) fn soft_max(ctx: &mut Ctx, scale: f32, max_bias: f32) -> Result<()> {
    let a = ctx.dense(0)?;
    let mask = ctx.opt_dense(1)?;
    let sinks = ctx.opt_dense(2)?;
    let [n, n1, n2, n3] = a.ne;
    let mut out = vec![0f32; a.data.len()];
    let mut w = vec![0f32; n];
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            let slope = alibi_slope(i2, n2, max_bias);
            let sink = sinks.as_ref().map(|s| s.data[i2]);
            for i1 in 0..n1 {
                for (wv, &x) in w.iter_mut().zip(a.row(i1, i2, i3)) {
                    *wv = x * scale;
                }
                if let Some(m) = &mask {
                    let mrow = m.row(i1, i2 % m.ne[2], i3 % m.ne[3]);
                    for (wv, &mv) in w.iter_mut().zip(mrow) {
                        *wv += slope * mv;
                    }
                }
                let mut max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                if let Some(s) = sink {
                    max = max.max(s);
                }
                let o = a.idx(0, i1, i2, i3);
                let dst = &mut out[o..o + n];
                let mut sum = 0f64;
                for (d, &wv) in dst.iter_mut().zip(&w) {
                    *d = (wv - max).exp();
                    sum += f64::from(*d);
                }
                if let Some(s) = sink {
                    sum += f64::from((s - max).exp());
                }
                let inv = (1.0 / sum) as f32;
                dst.iter_mut().for_each(|d| *d *= inv);
            }
        }
    }
    ctx.write(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alibi_slopes_follow_ggml() {
        // n_head = 8, max_bias = 8: m0 = 2^-1, slopes 1/2, 1/4, ... 1/256.
        for h in 0..8 {
            assert_eq!(alibi_slope(h, 8, 8.0), 0.5f32.powi(h as i32 + 1));
        }
        // n_head = 6: n_head_log2 = 4, m1 = 2^(-8/2/4) = 1/2; heads 4, 5 use odd powers of m1.
        assert_eq!(alibi_slope(4, 6, 8.0), 0.5);
        assert_eq!(alibi_slope(5, 6, 8.0), 0.125);
        assert_eq!(alibi_slope(3, 6, 0.0), 1.0);
    }
}
