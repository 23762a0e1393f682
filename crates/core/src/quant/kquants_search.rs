//! Scale searches shared by the K-quant quantizers (`make_qx_quants`, `make_q3_quants`,
//! `make_qkx2_quants` and `best_index_int8` in ggml's `ggml-quants.c`, re-expressed).
//!
//! Each search picks, for one small group of values, a scale (and for the asymmetric formats a
//! minimum) and the integer codes that minimise a weighted error; the block quantizers in
//! [`super::kquants`] then quantize those per-group scales themselves.

use super::{nearest_int, signed_max};

/// Below this magnitude a group counts as all zero (`GROUP_MAX_EPS` in ggml).
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// Symmetric codes in `-nmax..nmax` (stored as `l + nmax` in `codes`), with weights `x²`
/// (ggml's `make_qx_quants` with `rmse_type = 1` and no importance matrix).
///
/// Starts from `scale = max / -nmax`, then tries 18 nearby scales and keeps the one whose
/// least-squares fit `Σwxl / Σwl²` explains most of the weighted energy. Returns the scale.
pub(super) fn make_qx_quants(x: &[f32], nmax: i32, codes: &mut [i8]) -> f32 {
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let fit = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let assign = |iscale: f32, codes: &mut [i8]| {
        for (c, &v) in codes.iter_mut().zip(x) {
            *c = (nearest_int(iscale * v).clamp(-nmax, nmax - 1) + nmax) as i8;
        }
    };
    let iscale = -(nmax as f32) / max;
    assign(iscale, codes);
    let (sumlx, suml2) = fit(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            assign(iscale, codes);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric 3-bit codes in `-nmax..nmax` (stored as `l + nmax`), refined one code at a time to
/// maximise `(Σwxl)² / Σwl²` with weights `x²` (ggml's `make_q3_quants` with `do_rmse`).
pub(super) fn make_q3_quants(x: &[f32], nmax: i32, codes: &mut [i8]) -> f32 {
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (c, &v) in codes.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *c = l as i8;
        let (w, l) = (v * v, l as f32);
        sumlx += w * v * l;
        suml2 += w * l * l;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (c, &v) in codes.iter_mut().zip(x) {
            let w = v * v;
            let old = f32::from(*c);
            let mut slx = sumlx - w * v * old;
            if slx <= 0.0 {
                continue;
            }
            let mut sl2 = suml2 - w * old * old;
            let new = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
            if new != i32::from(*c) {
                let new_f = new as f32;
                slx += w * v * new_f;
                sl2 += w * new_f * new_f;
                if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                    *c = new as i8;
                    sumlx = slx;
                    suml2 = sl2;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for c in codes.iter_mut() {
        *c += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// How [`make_qkx2_quants`] sweeps candidate scales: `iscale = (nmax + rmin + rdelta * i) / range`
/// for `i` in `0..=nstep`, scoring by absolute (`use_mad`) or squared weighted error.
pub(super) struct Sweep {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// Asymmetric codes `0..=nmax` with `x ≈ scale * code - min` (ggml's `make_qkx2_quants`).
///
/// For each candidate scale it solves the weighted least-squares problem for `(scale, min)` with
/// the codes fixed, and keeps the best. Returns `(scale, min)` with `min >= 0` (the value
/// subtracted); `codes` holds the chosen codes.
pub(super) fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    sweep: &Sweep,
    codes: &mut [u8],
    aux: &mut [u8],
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        min = min.min(v);
        max = max.max(v);
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let error = |scale: f32, min: f32, codes: &[u8]| {
        let mut e = 0.0f32;
        for ((&c, &v), &w) in codes.iter().zip(x).zip(weights) {
            let diff = scale * f32::from(c) + min - v;
            e += w * if sweep.use_mad {
                diff.abs()
            } else {
                diff * diff
            };
        }
        e
    };
    let quantize_with = |iscale: f32, min: f32, codes: &mut [u8]| {
        for (c, &v) in codes.iter_mut().zip(x) {
            *c = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
        }
    };
    let iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    quantize_with(iscale, min, codes);
    let mut best_error = error(scale, min, codes);
    for is in 0..=sweep.nstep {
        let iscale = (sweep.rmin + sweep.rdelta * is as f32 + nmax_f) / (max - min);
        quantize_with(iscale, min, aux);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((&c, &v), &w) in aux.iter().zip(x).zip(weights) {
            let l = f32::from(c);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur = error(this_scale, this_min, aux);
            if cur < best_error {
                codes.copy_from_slice(aux);
                best_error = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The index of the entry of the ascending table `values` nearest to `x` (ggml's
/// `best_index_int8`); on an exact tie the upper entry wins.
pub(super) fn best_index(values: &[i8; 16], x: f32) -> u8 {
    if x <= f32::from(values[0]) {
        return 0;
    }
    if x >= f32::from(values[15]) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < f32::from(values[mid]) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - f32::from(values[hi - 1]) < f32::from(values[hi]) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}
