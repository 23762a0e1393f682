//! Matrix products: mul_mat (any weight dtype, rows dequantized on the fly), mul_mat_id.

use rayon::prelude::*;
use wgllm_core::Result;

use crate::Ctx;

/// `r[m, n, i2, i3] = Σ_k a[k, m, i2 / (b2/a2), i3 / (b3/a3)] · b[k, n, i2, i3]`, f32 accumulation.
pub(crate) fn mul_mat(ctx: &mut Ctx) -> Result<()> {
    let a = ctx.src(0)?;
    let b = ctx.dense(1)?;
    let ane = a.ne();
    let (k, m, n) = (ane[0], ane[1], b.ne[1]);
    let (r2, r3) = (b.ne[2] / ane[2], b.ne[3] / ane[3]);
    let mut out = vec![0f32; m * n * b.ne[2] * b.ne[3]];
    for i3 in 0..b.ne[3] {
        for i2 in 0..b.ne[2] {
            // One column of results per weight row, computed in parallel over rows.
            let cols: Vec<Vec<f32>> = (0..m)
                .into_par_iter()
                .map(|im| {
                    let mut row = vec![0f32; k];
                    a.row_f32(im, i2 / r2, i3 / r3, &mut row)?;
                    Ok((0..n).map(|jn| dot(&row, b.row(jn, i2, i3))).collect())
                })
                .collect::<Result<_>>()?;
            let base = (i3 * b.ne[2] + i2) * m * n;
            for (im, col) in cols.iter().enumerate() {
                for (jn, v) in col.iter().enumerate() {
                    out[base + jn * m + im] = *v;
                }
            }
        }
    }
    ctx.write(&out)
}

/// Plain f32 dot product.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub(crate) fn mul_mat_id(ctx: &mut Ctx) -> Result<()> {
    super::not_yet(ctx)
}
