//! Normalizations over each row of dim 0: rms_norm, norm (layer norm without affine), l2_norm.
//! Sums accumulate in f64 as ggml's `ggml_float` does.

use rayon::prelude::*;
use wgllm_core::Result;

use crate::Ctx;

/// Applies `f(src_row, dst_row)` to every row of source 0 and writes the result.
fn per_row(ctx: &mut Ctx, f: impl Fn(&[f32], &mut [f32]) + Sync) -> Result<()> {
    let a = ctx.dense(0)?;
    let mut out = vec![0f32; a.data.len()];
    let n = a.ne[0];
    if n > 0 {
        out.par_chunks_exact_mut(n)
            .zip(a.data.par_chunks_exact(n))
            .for_each(|(dst, src)| f(src, dst));
    }
    ctx.write(&out)
}

/// Scales `src` by `s` into `dst`.
fn scaled(src: &[f32], dst: &mut [f32], s: f32) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = x * s;
    }
}

/// ggml_rms_norm: `y = x / sqrt(mean(x²) + eps)`.
pub(crate) fn rms_norm(ctx: &mut Ctx, eps: f32) -> Result<()> {
    per_row(ctx, |x, y| {
        let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
        let mean = (sum / x.len() as f64) as f32;
        scaled(x, y, 1.0 / (mean + eps).sqrt());
    })
}

/// ggml_norm: `y = (x - mean) / sqrt(var + eps)`, the variance taken about the mean.
pub(crate) fn norm(ctx: &mut Ctx, eps: f32) -> Result<()> {
    per_row(ctx, |x, y| {
        let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let mean = (sum / x.len() as f64) as f32;
        let mut var = 0f64;
        for (d, &v) in y.iter_mut().zip(x) {
            *d = v - mean;
            var += f64::from(*d * *d);
        }
        let scale = 1.0 / ((var / x.len() as f64) as f32 + eps).sqrt();
        y.iter_mut().for_each(|d| *d *= scale);
    })
}

/// ggml_l2_norm: `y = x / max(‖x‖₂, eps)`.
pub(crate) fn l2_norm(ctx: &mut Ctx, eps: f32) -> Result<()> {
    per_row(ctx, |x, y| {
        let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
        scaled(x, y, 1.0 / (sum as f32).sqrt().max(eps));
    })
}
