//! Op-table cases of the draw from top-k candidates (`SAMPLE`).
//!
//! The result is a token id, compared exactly. The kernel's exps and divisions round differently
//! from the CPU reference's, so a running sum or probability within rounding of the threshold it
//! is compared with (`r`, `top_p`, `min_p · p[0]`) could tip either way: each row's candidates
//! and parameters are drawn again until every such comparison, redone in f64, clears its
//! threshold by [`MARGIN`] (f32 sums of 256 probabilities are off by ~1e-5 at most). Rows draw
//! their temperature, top_k, top_p and min_p from edge values (off, 0, 1, the candidate count
//! and past it) and random ones, and `r` uniformly, so every cut and every candidate position
//! is taken somewhere.

use wgllm_core::op::SampleParams;
use wgllm_core::{DType, Error, Graph, Result};

use super::cases::{case, EXACT};
use super::{Built, Case, Rng};

/// Smallest distance, in f64, of a running sum or probability from its threshold.
const MARGIN: f64 = 1e-4;

/// One row's logits, largest first: uniform over `spread`, or with `ties` a few levels
/// (adjacent equal values).
fn logits(rng: &mut Rng, k: usize, spread: f32, ties: bool) -> Vec<f32> {
    let mut v: Vec<f32> = (0..k)
        .map(|_| match ties {
            true => (rng.below(4) as f32 - 2.0) * spread / 4.0,
            false => rng.uniform(-spread, spread),
        })
        .collect();
    v.sort_by(|a, b| b.total_cmp(a));
    v
}

fn softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// The SAMPLE decisions for `vals` under `p`, in f64: false when one lies within [`MARGIN`] of
/// its threshold. Candidates tied with the first sit exactly on `min_p = 1`'s threshold in
/// both implementations (equal inputs, equal exps), so they clear it.
fn clear_of_boundaries(vals: &[f32], p: &SampleParams) -> bool {
    if p.temperature <= 0.0 {
        return true;
    }
    let n = match p.top_k as usize {
        0 => vals.len(),
        k => k.min(vals.len()),
    };
    let x: Vec<f64> = vals[..n].iter().map(|&v| f64::from(v)).collect();
    let probs = softmax(&x);
    let mut keep = n;
    if p.top_p < 1.0 {
        let (top_p, mut acc) = (f64::from(p.top_p), 0.0);
        for (i, q) in probs.iter().enumerate() {
            acc += q;
            if (acc - top_p).abs() < MARGIN {
                return false;
            }
            if acc >= top_p {
                keep = i + 1;
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * f64::from(p.min_p);
        let mut c = 0;
        for (i, q) in probs.iter().enumerate() {
            let tie = p.min_p == 1.0 && vals[i] == vals[0];
            if !tie && (q - floor).abs() < MARGIN * floor {
                return false;
            }
            if *q < floor && !tie {
                break;
            }
            c += 1;
        }
        keep = keep.min(c.max(1));
    }
    let scaled: Vec<f64> = x[..keep]
        .iter()
        .map(|v| v / f64::from(p.temperature))
        .collect();
    let mut acc = 0.0;
    // The last candidate is drawn whether r falls short of the last sum or not.
    for q in &softmax(&scaled)[..keep - 1] {
        acc += q;
        if (acc - f64::from(p.r)).abs() < MARGIN {
            return false;
        }
    }
    true
}

/// Random parameters for `k` candidates, edge values among them.
fn params(rng: &mut Rng, k: u32) -> SampleParams {
    let mut pick = |xs: &[f32]| xs[rng.below(xs.len() as u64) as usize];
    // 2e-38: logit / temperature would overflow f32 (the smallest normal f32 is 1.2e-38).
    let temperature = pick(&[0.0, 0.25, 0.8, 1.0, 1.5, 2e-38]);
    let top_k = [0, 1, k.div_ceil(2), k, k + 3][rng.below(5) as usize];
    let top_p = match rng.below(4) {
        0 => 1.0,
        1 => 0.0,
        _ => rng.uniform(0.3, 0.99),
    };
    let min_p = match rng.below(4) {
        0 => 0.0,
        1 => 1.0,
        _ => rng.uniform(0.0, 0.3),
    };
    SampleParams {
        r: rng.uniform(0.0, 1.0),
        temperature,
        top_p,
        min_p,
        top_k,
    }
}

/// `rows` rows of `k` candidates (distinct ids below 50,000) and parameters clear of every
/// boundary: the bytes of vals, ids and params.
fn rows_data(rng: &mut Rng, k: u32, rows: u64, spread: f32, ties: bool) -> Result<[Vec<u8>; 3]> {
    let (mut vals, mut ids, mut ps) = (vec![], vec![], vec![]);
    for _ in 0..rows {
        let (v, p) = (0..1000)
            .map(|_| (logits(rng, k as usize, spread, ties), params(rng, k)))
            .find(|(v, p)| clear_of_boundaries(v, p))
            .ok_or_else(|| Error::graph("no row clear of the sampling boundaries"))?;
        let mut row_ids: Vec<i32> = Vec::with_capacity(k as usize);
        while row_ids.len() < k as usize {
            let id = rng.below(50_000) as i32;
            if !row_ids.contains(&id) {
                row_ids.push(id);
            }
        }
        vals.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        ids.extend(row_ids.iter().flat_map(|x| x.to_le_bytes()));
        ps.extend(p.to_bytes());
    }
    Ok([vals, ids, ps])
}

/// The three inputs of a SAMPLE over `k` candidates and `rows` rows; `transposed`: the values
/// arrive as `[rows, k]` and are read through a transposed view.
fn sample_graph(
    g: &mut Graph,
    data: [Vec<u8>; 3],
    k: u64,
    rows: u64,
    transposed: bool,
) -> Result<Built> {
    let [vals, ids, ps] = data;
    let mut b = Built::default();
    let v = match transposed {
        false => g.input("vals", DType::F32, [k, rows, 1, 1])?,
        true => g.input("vals", DType::F32, [rows, k, 1, 1])?,
    };
    let vals = match transposed {
        false => vals,
        // Element (i, r) of the [k, rows] view is at r + i * rows.
        true => (0..k * rows)
            .flat_map(|j| {
                let (r, i) = ((j % rows) as usize, (j / rows) as usize);
                let at = 4 * (r * k as usize + i);
                [vals[at], vals[at + 1], vals[at + 2], vals[at + 3]]
            })
            .collect(),
    };
    b.inputs.push((v, vals));
    let v = match transposed {
        false => v,
        true => g.transpose(v)?,
    };
    let i = g.input("ids", DType::I32, [k, rows, 1, 1])?;
    b.inputs.push((i, ids));
    let p = g.input("params", DType::F32, [SampleParams::WORDS, rows, 1, 1])?;
    b.inputs.push((p, ps));
    let s = g.sample(v, i, p)?;
    g.mark_output(s)?;
    Ok(b)
}

/// Adds the SAMPLE cases.
pub(super) fn add(out: &mut Vec<Case>) {
    // (candidates, rows, logit spread, ties, transposed values)
    let shapes = [
        (1u32, 4u64, 1.0f32, false, false),
        (2, 16, 1.0, false, false),
        (7, 16, 3.0, true, false),
        (40, 24, 4.0, false, false),
        (64, 24, 8.0, false, false),
        (64, 16, 2.0, true, false),
        (64, 8, 20.0, false, true),
        (256, 8, 6.0, false, false),
    ];
    for (k, rows, spread, ties, transposed) in shapes {
        let desc =
            format!("SAMPLE k={k} rows={rows} spread={spread} ties={ties} transposed={transposed}");
        out.push(case("SAMPLE", desc, EXACT, move |g, rng| {
            let data = rows_data(rng, k, rows, spread, ties)?;
            sample_graph(g, data, u64::from(k), rows, transposed)
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_are_found() {
        // softmax([1, 0]) = [0.731, 0.269].
        let p = SampleParams {
            r: 0.7311,
            temperature: 1.0,
            top_p: 1.0,
            min_p: 0.0,
            top_k: 0,
        };
        assert!(!clear_of_boundaries(&[1.0, 0.0], &p), "r on the first sum");
        assert!(clear_of_boundaries(
            &[1.0, 0.0],
            &SampleParams { r: 0.5, ..p }
        ));
        let cut = SampleParams {
            r: 0.5,
            top_p: 0.7311,
            ..p
        };
        assert!(
            !clear_of_boundaries(&[1.0, 0.0], &cut),
            "top_p on the first sum"
        );
        let floor = SampleParams {
            r: 0.5,
            min_p: 0.3679,
            ..p
        };
        assert!(!clear_of_boundaries(&[1.0, 0.0], &floor), "min_p at e^-1");
        let ties = SampleParams {
            r: 0.3,
            min_p: 1.0,
            ..p
        };
        assert!(clear_of_boundaries(&[1.0, 1.0, 0.0], &ties));
    }
}
