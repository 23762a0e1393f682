//! GLU family (ggml_glu, ggml_glu_split): reglu, geglu, swiglu, swiglu_oai, geglu_erf,
//! geglu_quick, over the two halves of each row or over two tensors.

use wgllm_core::op::GluOp;
use wgllm_core::{Error, Result};

use super::elementwise::{gelu, gelu_erf, gelu_quick, silu};
use crate::Ctx;

/// `f(x, g)`: the activation of the gated value `x` times the linear value `g`
/// (ggml_vec_{reglu,geglu,swiglu,swiglu_oai,geglu_erf,geglu_quick}_f32).
fn gate(op: GluOp, x: f32, g: f32) -> f32 {
    match op {
        GluOp::Reglu => {
            if x > 0.0 {
                x * g
            } else {
                0.0
            }
        }
        GluOp::Geglu => gelu(x) * g,
        GluOp::Swiglu => silu(x) * g,
        GluOp::SwigluOai { alpha, limit } => {
            let x = x.min(limit);
            // max/min rather than clamp: a negative limit must not panic.
            let g = g.max(-limit).min(limit);
            x / (1.0 + (-alpha * x).exp()) * (g + 1.0)
        }
        GluOp::GegluErf => gelu_erf(x) * g,
        GluOp::GegluQuick => gelu_quick(x) * g,
    }
}

/// ggml_glu (one source: `x` is the first half of each row and `g` the second, exchanged when
/// `swapped`) and ggml_glu_split (two sources: `x` from `a`, `g` from `b`).
pub(crate) fn glu(ctx: &mut Ctx, op: GluOp, swapped: bool) -> Result<()> {
    let a = ctx.dense(0)?;
    let b = ctx.opt_dense(1)?;
    let nc = ctx.out_ne()[0];
    let fits = match &b {
        Some(b) => a.ne[0] == nc && b.ne == a.ne,
        None => a.ne[0] == 2 * nc,
    };
    if !fits {
        return Err(Error::shape("glu sources do not match the node's extents"));
    }
    let mut out = Vec::with_capacity(nc * a.nrows());
    if nc > 0 {
        let b_rows = b.as_ref().map(|b| b.data.chunks_exact(nc));
        let mut b_rows = b_rows.into_iter().flatten();
        for row in a.data.chunks_exact(a.ne[0]) {
            let (x, g) = match b_rows.next() {
                Some(g) => (row, g),
                None if swapped => (&row[nc..2 * nc], &row[..nc]),
                None => (&row[..nc], &row[nc..2 * nc]),
            };
            out.extend(x.iter().zip(g).map(|(&x, &g)| gate(op, x, g)));
        }
    }
    ctx.write(&out)
}
