//! Reductions and sorting: sum, sum_rows, cumsum, argmax, argsort, top_k.
//!
//! Sums accumulate in f64 so the reference is not the noisiest part of a comparison; sorting is
//! stable, so ties always resolve to the lower index.

use std::cmp::Ordering;

use wgllm_core::op::SortOrder;
use wgllm_core::Result;

use crate::Ctx;

/// ggml_sum: one value, the sum of every element.
pub(crate) fn sum(ctx: &mut Ctx) -> Result<()> {
    let a = ctx.dense(0)?;
    let s: f64 = a.data.iter().map(|&v| f64::from(v)).sum();
    ctx.write(&[s as f32])
}

/// ggml_sum_rows: `r[0, i1, i2, i3] = Σ_i0 a[i0, i1, i2, i3]`.
pub(crate) fn sum_rows(ctx: &mut Ctx) -> Result<()> {
    let a = ctx.dense(0)?;
    let n0 = a.ne[0];
    let out: Vec<f32> = (0..a.nrows())
        .map(|r| {
            a.data[r * n0..(r + 1) * n0]
                .iter()
                .map(|&v| f64::from(v))
                .sum::<f64>() as f32
        })
        .collect();
    ctx.write(&out)
}

/// ggml_cumsum: inclusive prefix sums along dim 0.
pub(crate) fn cumsum(ctx: &mut Ctx) -> Result<()> {
    let mut a = ctx.dense(0)?;
    let n0 = a.ne[0];
    if n0 > 0 {
        for row in a.data.chunks_mut(n0) {
            let mut acc = 0f64;
            for v in row.iter_mut() {
                acc += f64::from(*v);
                *v = acc as f32;
            }
        }
    }
    ctx.write(&a.data)
}

/// ggml_argmax: index of the largest value of each row; the lowest index wins a tie.
pub(crate) fn argmax(ctx: &mut Ctx) -> Result<()> {
    let a = ctx.dense(0)?;
    let out: Vec<i32> = (0..a.nrows())
        .map(|r| {
            let row = &a.data[r * a.ne[0]..(r + 1) * a.ne[0]];
            let mut best = 0usize;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            best as i32
        })
        .collect();
    ctx.write_i32(&out)
}

/// Ascending order of two values as ggml's `<` sees them (`-0 == 0`), NaN after every number.
fn cmp_f32(x: f32, y: f32) -> Ordering {
    x.partial_cmp(&y)
        .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan()))
}

/// Indices of `row` in stable sorted order.
fn sorted_indices(row: &[f32], order: SortOrder) -> Vec<i32> {
    let mut idx: Vec<i32> = (0..row.len() as i32).collect();
    let key = |i: &i32| row[*i as usize];
    match order {
        SortOrder::Asc => idx.sort_by(|a, b| cmp_f32(key(a), key(b))),
        SortOrder::Desc => idx.sort_by(|a, b| cmp_f32(key(b), key(a))),
    }
    idx
}

/// ggml_argsort: per row, the indices that sort it (stable: equal values keep index order).
pub(crate) fn argsort(ctx: &mut Ctx, order: SortOrder) -> Result<()> {
    let a = ctx.dense(0)?;
    let n0 = a.ne[0];
    let mut out = Vec::with_capacity(a.data.len());
    for r in 0..a.nrows() {
        out.extend(sorted_indices(&a.data[r * n0..(r + 1) * n0], order));
    }
    ctx.write_i32(&out)
}

/// ggml_top_k: per row, the indices of the `k` largest values, largest first (ties: lower index
/// first).
pub(crate) fn top_k(ctx: &mut Ctx, k: u32) -> Result<()> {
    let a = ctx.dense(0)?;
    let (n0, k) = (a.ne[0], k as usize);
    let mut out = Vec::with_capacity(a.nrows() * k);
    for r in 0..a.nrows() {
        let row = &a.data[r * n0..(r + 1) * n0];
        let mut idx: Vec<usize> = (0..n0).collect();
        // Partial selection, then a stable sort of the k winners.
        let desc = |x: &usize, y: &usize| cmp_f32(row[*y], row[*x]).then(x.cmp(y));
        if k < n0 {
            idx.select_nth_unstable_by(k - 1, desc);
            idx.truncate(k);
        }
        idx.sort_by(desc);
        out.extend(idx.iter().map(|&i| i as i32));
    }
    ctx.write_i32(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_orders() {
        let row = [1.0, 3.0, 1.0, 3.0, 2.0];
        assert_eq!(sorted_indices(&row, SortOrder::Asc), vec![0, 2, 4, 1, 3]);
        assert_eq!(sorted_indices(&row, SortOrder::Desc), vec![1, 3, 4, 0, 2]);
        assert_eq!(sorted_indices(&[0.0, -0.0], SortOrder::Asc), vec![0, 1]);
    }
}
