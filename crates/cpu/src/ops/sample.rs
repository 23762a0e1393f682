//! The draw from top-k candidates (`Op::Sample`), in exactly the arithmetic of wgllm-models'
//! `Sampler::pick`: f32 throughout, every sum in candidate order, so on this backend a step's
//! drawn token equals the host sampler's draw from the same candidates and uniform.

use wgllm_core::op::SampleParams;
use wgllm_core::Result;

use crate::Ctx;

/// `softmax(x)` as the host sampler computes it: the maximum subtracted, exps summed in order.
fn softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// The index of the candidate drawn from `vals` (largest first) under `p`.
pub(crate) fn draw(vals: &[f32], p: &SampleParams) -> usize {
    if p.temperature <= 0.0 || vals.len() <= 1 {
        return 0;
    }
    let n = match p.top_k as usize {
        0 => vals.len(),
        k => k.min(vals.len()),
    };
    let vals = &vals[..n];
    let probs = softmax(vals);
    let mut keep = n;
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        for (i, q) in probs.iter().enumerate() {
            acc += q;
            if acc >= p.top_p {
                keep = i + 1;
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p;
        keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
    }
    let keep = keep.max(1);
    let scaled: Vec<f32> = vals[..keep].iter().map(|v| v / p.temperature).collect();
    let mut acc = 0.0;
    for (i, q) in softmax(&scaled).iter().enumerate() {
        acc += q;
        if p.r < acc {
            return i;
        }
    }
    keep - 1
}

/// `Op::Sample`: per row, the id of the candidate [`draw`] picks.
pub(crate) fn sample(ctx: &mut Ctx) -> Result<()> {
    let vals = ctx.dense(0)?;
    let ids = ctx.ints(1)?;
    let params = ctx.dense(2)?;
    let k = vals.ne[0];
    let w = SampleParams::WORDS as usize;
    let out: Vec<i32> = (0..vals.nrows())
        .map(|r| {
            let mut v = [0f32; 5];
            v.copy_from_slice(&params.data[r * w..(r + 1) * w]);
            let i = draw(
                &vals.data[r * k..(r + 1) * k],
                &SampleParams::from_values(v),
            );
            ids[r * k + i] as i32
        })
        .collect();
    ctx.write_i32(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(r: f32, temperature: f32, top_p: f32, min_p: f32, top_k: u32) -> SampleParams {
        SampleParams {
            r,
            temperature,
            top_p,
            min_p,
            top_k,
        }
    }

    #[test]
    fn cuts_and_draw_follow_the_running_sums() {
        // softmax ≈ [0.644, 0.237, 0.087, 0.032]
        let v = [3.0, 2.0, 1.0, 0.0];
        assert_eq!(draw(&v, &params(0.99, 0.0, 1.0, 0.0, 0)), 0, "greedy");
        assert_eq!(draw(&v, &params(0.0, 1.0, 1.0, 0.0, 0)), 0);
        assert_eq!(draw(&v, &params(0.7, 1.0, 1.0, 0.0, 0)), 1);
        assert_eq!(draw(&v, &params(0.9, 1.0, 1.0, 0.0, 0)), 2);
        assert_eq!(draw(&v, &params(0.999, 1.0, 1.0, 0.0, 0)), 3);
        // top_k 2 renormalizes over two: 0.731 | 0.269.
        assert_eq!(draw(&v, &params(0.72, 1.0, 1.0, 0.0, 2)), 0);
        assert_eq!(draw(&v, &params(0.74, 1.0, 1.0, 0.0, 2)), 1);
        assert_eq!(draw(&v, &params(0.999, 1.0, 1.0, 0.0, 2)), 1);
        // top_p 0.85: 0.644 + 0.237 = 0.881 reaches it at the second candidate, two kept.
        assert_eq!(draw(&v, &params(0.999, 1.0, 0.85, 0.0, 0)), 1);
        assert_eq!(draw(&v, &params(0.999, 1.0, 0.5, 0.0, 0)), 0);
        // min_p 0.1 keeps p >= 0.0644: three.
        assert_eq!(draw(&v, &params(0.999, 1.0, 1.0, 0.1, 0)), 2);
        // Temperature 0.5 sharpens: softmax(2v) ≈ [0.865, 0.117, ...].
        assert_eq!(draw(&v, &params(0.8, 0.5, 1.0, 0.0, 0)), 0);
        assert_eq!(draw(&v, &params(0.8, 1.0, 1.0, 0.0, 0)), 1);
        // min_p 1 keeps the ties of the first.
        assert_eq!(draw(&[1.0, 1.0, 0.5], &params(0.9, 1.0, 1.0, 1.0, 0)), 1);
    }
}
