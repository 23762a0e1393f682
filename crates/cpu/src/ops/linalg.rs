//! Linear algebra: solve_tri (ggml_compute_forward_solve_tri, by substitution).

use wgllm_core::{Error, Result};

use crate::Ctx;

/// Solves `A·X = B` (`left`) or `X·A = B` for each batch matrix, reading only `A`'s `lower` or
/// upper triangle, with a unit diagonal when `uni`. `A` is `[n, n, b2, b3]` with `a[c, r]` the
/// element of row `r`, column `c`; `B` and `X` store row `r`, column `c` at `[c, r]` too.
pub(crate) fn solve_tri(ctx: &mut Ctx, left: bool, lower: bool, uni: bool) -> Result<()> {
    let a = ctx.dense(0)?;
    let b = ctx.dense(1)?;
    let n = a.ne[0];
    let [cols, rows, b2, b3] = b.ne;
    let mut x = b.data.clone();
    for i3 in 0..b3 {
        for i2 in 0..b2 {
            let am = |r: usize, c: usize| a.at(c, r, i2, i3);
            let base = b.idx(0, 0, i2, i3);
            let xm = &mut x[base..base + cols * rows];
            // Left: column j of X solves A·x = b. Right: row j of X solves Aᵀ·x = b, i.e. the
            // same substitution with A's indices swapped (lower becomes upper).
            let (systems, stride_sys, stride_elem) = if left {
                (cols, 1, cols)
            } else {
                (rows, cols, 1)
            };
            let at = |r: usize, c: usize| if left { am(r, c) } else { am(c, r) };
            let forward = lower == left;
            for j in 0..systems {
                let idx = |i: usize| j * stride_sys + i * stride_elem;
                for step in 0..n {
                    let i = if forward { step } else { n - 1 - step };
                    let solved = if forward { 0..i } else { i + 1..n };
                    let mut s = xm[idx(i)];
                    for t in solved {
                        s -= at(i, t) * xm[idx(t)];
                    }
                    let diag = if uni { 1.0 } else { at(i, i) };
                    if diag == 0.0 {
                        return Err(Error::shape(format!(
                            "solve_tri: zero on the diagonal at {i} (batch {i2}, {i3})"
                        )));
                    }
                    xm[idx(i)] = s / diag;
                }
            }
        }
    }
    ctx.write(&x)
}
