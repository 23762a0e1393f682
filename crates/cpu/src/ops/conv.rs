//! Convolutions: conv_2d (ggml_conv_2d_direct) and im2col (ggml_im2col).

use rayon::prelude::*;
use wgllm_core::Result;

use crate::store::Dense;
use crate::Ctx;

/// Input coordinate of output `o`, kernel tap `k` along one axis, or `None` in the padding.
#[inline]
fn tap(o: usize, k: usize, s: u32, p: u32, d: u32, len: usize) -> Option<usize> {
    let i = (o * s as usize + k * d as usize).checked_sub(p as usize)?;
    (i < len).then_some(i)
}

/// ggml_conv_2d_direct: `r[ox, oy, co, n] = Σ_{ci, ky, kx} kernel[kx, ky, ci, co] ·
/// input[ox·s0 + kx·d0 - p0, oy·s1 + ky·d1 - p1, ci, n]` (zero padding).
pub(crate) fn conv_2d(ctx: &mut Ctx, s: [u32; 2], p: [u32; 2], d: [u32; 2]) -> Result<()> {
    let kernel = ctx.dense(0)?;
    let input = ctx.dense(1)?;
    let [ow, oh, c_out, n] = ctx.out_ne();
    let [kw, kh, c_in, _] = kernel.ne;
    let [iw, ih, _, _] = input.ne;
    // One output plane (co, n) per task.
    let planes: Vec<Vec<f32>> = (0..n * c_out)
        .into_par_iter()
        .map(|plane| {
            let (co, b) = (plane % c_out, plane / c_out);
            let mut out = vec![0f32; ow * oh];
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0f32;
                    for ci in 0..c_in {
                        for ky in 0..kh {
                            let Some(y) = tap(oy, ky, s[1], p[1], d[1], ih) else {
                                continue;
                            };
                            for kx in 0..kw {
                                if let Some(x) = tap(ox, kx, s[0], p[0], d[0], iw) {
                                    acc += kernel.at(kx, ky, ci, co) * input.at(x, y, ci, b);
                                }
                            }
                        }
                    }
                    out[oy * ow + ox] = acc;
                }
            }
            out
        })
        .collect();
    ctx.write(&planes.concat())
}

/// ggml_im2col. 2-D: `r[(c·KH + ky)·KW + kx, ox, oy, n] = input[ox·s0 + kx·d0 - p0,
/// oy·s1 + ky·d1 - p1, c, n]`; 1-D is the same with `KH = OH = 1`, the input `[W, C, N]` and the
/// result `[C·KW, OW, N, 1]`. Taps in the padding are zero.
pub(crate) fn im2col(
    ctx: &mut Ctx,
    s: [u32; 2],
    p: [u32; 2],
    d: [u32; 2],
    is_2d: bool,
) -> Result<()> {
    let kne = ctx.src(0)?.ne();
    let input = ctx.dense(1)?;
    // View the 1-D case as 2-D with one row: input [W, 1, C, N], kernel [KW, 1, C].
    let input = if is_2d {
        input
    } else {
        let [w, c, n, _] = input.ne;
        Dense {
            ne: [w, 1, c, n],
            data: input.data,
        }
    };
    let (kw, kh) = (kne[0], if is_2d { kne[1] } else { 1 });
    let [iw, ih, c, _] = input.ne;
    let [patch, ow, d2, d3] = ctx.out_ne();
    let (oh, n) = if is_2d { (d2, d3) } else { (1, d2) };
    let mut out = vec![0f32; patch * ow * oh * n];
    for (pi, dst) in out.chunks_exact_mut(patch.max(1)).enumerate() {
        let (ox, oy, b) = (pi % ow, (pi / ow) % oh, pi / (ow * oh));
        for ci in 0..c {
            for ky in 0..kh {
                let y = tap(oy, ky, s[1], p[1], d[1], ih);
                for kx in 0..kw {
                    let x = tap(ox, kx, s[0], p[0], d[0], iw);
                    dst[(ci * kh + ky) * kw + kx] = match (x, y) {
                        (Some(x), Some(y)) => input.at(x, y, ci, b),
                        _ => 0.0,
                    };
                }
            }
        }
    }
    ctx.write(&out)
}
