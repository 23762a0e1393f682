//! RoPE as ggml_compute_forward_rope_flt: normal, neox, multi-section (plain and interleaved),
//! vision; YaRN scaling (ggml_rope_yarn_corr_dims, rope_yarn) and frequency factors.
//!
//! Per token, a cache of `(cos, sin)` per rotated pair is built the way ggml builds it: the angle
//! starts at the position and is multiplied by `freq_base^(-2/n_dims)` from pair to pair (an f32
//! running product, so GPU kernels computing `pow` directly agree to rounding).

use std::f32::consts::PI;

use wgllm_core::op::{RopeMode, RopeParams};
use wgllm_core::{Error, Result};

use crate::Ctx;

/// ggml_rope_yarn_corr_dims: the first and last pair dims YaRN blends between interpolation and
/// extrapolation.
pub fn yarn_corr_dims(
    n_dims: u32,
    n_ctx_orig: u32,
    freq_base: f32,
    fast: f32,
    slow: f32,
) -> [f32; 2] {
    let nd = n_dims as f32;
    let dim =
        |n_rot: f32| nd * (n_ctx_orig as f32 / (n_rot * 2.0 * PI)).ln() / (2.0 * freq_base.ln());
    let start = dim(fast).floor();
    let end = dim(slow).ceil();
    [start.max(0.0), end.min(nd - 1.0)]
}

/// Per-model constants of one rope node.
struct Yarn {
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32,
    corr: [f32; 2],
}

impl Yarn {
    /// ggml's rope_yarn: `(cos θ, sin θ)·mscale` for the unscaled angle `theta_extrap` of pair
    /// dim `i0` (even).
    fn cos_sin(&self, theta_extrap: f32, i0: usize) -> (f32, f32) {
        let theta_interp = self.freq_scale * theta_extrap;
        let mut theta = theta_interp;
        let mut mscale = self.attn_factor;
        if self.ext_factor != 0.0 {
            let [low, high] = self.corr;
            let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
            let ramp = 1.0 - y.clamp(0.0, 1.0);
            let mix = ramp * self.ext_factor;
            theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
        }
        (theta.cos() * mscale, theta.sin() * mscale)
    }
}

/// Fills `cache` with `(cos, sin)` per pair for the multi-section and vision modes
/// (ggml_mrope_cache_init): pair `k` lies in sector `k mod Σsections` and takes its angle from the
/// t, h, w or e position of that sector's section (contiguous sections, or interleaved t/h/w for
/// `InterleavedMultiSection`); the vision mode restarts each section's angle where it begins.
fn mrope_cache(
    p: &RopeParams,
    pos: [f32; 4],
    yarn: &Yarn,
    ff: &dyn Fn(usize) -> f32,
    theta_scale: f32,
    cache: &mut [(f32, f32)],
) {
    let s = p.sections.map(|v| v as usize);
    let sect_dims = s.iter().sum::<usize>();
    let (sec_w, interleaved, vision) = (
        s[0] + s[1],
        p.mode == RopeMode::InterleavedMultiSection,
        p.mode == RopeMode::Vision,
    );
    let sec_e = sec_w + s[2];
    let mut theta = pos;
    for (k, c) in cache.iter_mut().enumerate() {
        let sector = k % sect_dims;
        if vision {
            // Each section restarts its own angle where it begins.
            if sector == 0 {
                theta[0] = pos[0];
            } else if sector == s[0] {
                theta[1] = pos[1];
            } else if sector == sec_w {
                theta[2] = pos[2];
            } else if sector == sec_e {
                theta[3] = pos[3];
            }
        }
        let section = if interleaved {
            if sector % 3 == 1 && sector < 3 * s[1] {
                1
            } else if sector % 3 == 2 && sector < 3 * s[2] {
                2
            } else if sector % 3 == 0 && sector < 3 * s[0] {
                0
            } else {
                3
            }
        } else if sector < s[0] {
            0
        } else if sector < sec_w {
            1
        } else if sector < sec_e {
            2
        } else {
            3
        };
        *c = yarn.cos_sin(theta[section] / ff(k), 2 * k);
        theta.iter_mut().for_each(|t| *t *= theta_scale);
    }
}

/// ggml_rope_ext / ggml_rope_multi.
pub(crate) fn rope(ctx: &mut Ctx, p: &RopeParams) -> Result<()> {
    let x = ctx.dense(0)?;
    let pos = ctx.ints(1)?;
    let factors = ctx.opt_dense(2)?;
    let [ne0, n1, n2, n3] = x.ne;
    let n_dims = p.n_dims as usize;
    let multi = matches!(
        p.mode,
        RopeMode::MultiSection | RopeMode::InterleavedMultiSection | RopeMode::Vision
    );
    // Rotated pairs: the first n_dims/2 (n_dims in the vision mode, which rotates whole heads).
    let pairs = if p.mode == RopeMode::Vision {
        ne0 / 2
    } else {
        n_dims / 2
    };
    if pos.len() != if multi { 4 * n2 } else { n2 }
        || factors.as_ref().is_some_and(|f| f.data.len() < pairs)
        || n_dims > ne0
        || p.mode == RopeMode::Vision && ne0 != 2 * n_dims
        || multi && p.sections.iter().sum::<u32>() == 0
    {
        return Err(Error::shape(
            "rope sources do not match the node's parameters",
        ));
    }
    let ff = |k: usize| factors.as_ref().map_or(1.0, |f| f.data[k]);
    let yarn = Yarn {
        freq_scale: p.freq_scale,
        ext_factor: p.ext_factor,
        attn_factor: p.attn_factor,
        corr: yarn_corr_dims(
            p.n_dims,
            p.n_ctx_orig,
            p.freq_base,
            p.beta_fast,
            p.beta_slow,
        ),
    };
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    // Element offsets of the two values pair k rotates.
    let pair_at = |k: usize| match p.mode {
        RopeMode::Normal => (2 * k, 2 * k + 1),
        RopeMode::Neox | RopeMode::MultiSection | RopeMode::InterleavedMultiSection => {
            (k, k + n_dims / 2)
        }
        RopeMode::Vision => (k, k + n_dims),
    };
    let mut out = x.data.clone();
    let mut cache = vec![(0f32, 0f32); pairs];
    for i2 in 0..n2 {
        if multi {
            let at = |s: usize| pos[i2 + s * n2] as f32;
            mrope_cache(
                p,
                [at(0), at(1), at(2), at(3)],
                &yarn,
                &ff,
                theta_scale,
                &mut cache,
            );
        } else {
            let mut theta = pos[i2] as f32;
            for (k, c) in cache.iter_mut().enumerate() {
                *c = yarn.cos_sin(theta / ff(k), 2 * k);
                theta *= theta_scale;
            }
        }
        for i3 in 0..n3 {
            for i1 in 0..n1 {
                let o = x.idx(0, i1, i2, i3);
                for (k, &(cos, sin)) in cache.iter().enumerate() {
                    let (a, b) = pair_at(k);
                    let (x0, x1) = (x.data[o + a], x.data[o + b]);
                    out[o + a] = x0 * cos - x1 * sin;
                    out[o + b] = x0 * sin + x1 * cos;
                }
            }
        }
    }
    ctx.write(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corr_dims_match_ggml_for_llama_yarn() {
        // n_dims 128, n_ctx_orig 4096, base 10000, beta 32/1: ggml gives [20, 46].
        assert_eq!(yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0), [20.0, 46.0]);
        // The start is clamped at 0, the end at n_dims - 1.
        assert_eq!(yarn_corr_dims(8, 1, 10.0, 32.0, 1e-9), [0.0, 7.0]);
    }
}
