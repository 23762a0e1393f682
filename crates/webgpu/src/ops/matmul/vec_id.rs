//! ggml_mul_mat_id through `mul_mat_vec.wgsl`'s ID (decode: a few columns per expert), alone
//! or with the up projection's product and a GLU of the two fused in (IdGlu).

use wgllm_core::DType;
use wgllm_core::Result;

use super::super::{windows, Ctx, Dispatch, Operand, MAX_GROUPS_PER_DIM};
use super::{
    bind_weights, cpu_lanes, product_words, q8x, quant_act, unit_decoded, unit_path, vec_key,
    vec_rpw, weight_bytes,
};
use crate::kernels::VecEpilogue;

/// A mul_mat_id (`srcs = [experts, b, ids]`, its context) through `mul_mat_vec.wgsl`'s ID:
/// one workgroup column per (expert slot, token), each reading only its expert's rows, decoded
/// as mul_mat's are; `None` where that path does not apply (weights without a unit decoder,
/// activations not bound as vec4s, more columns than a grid dimension holds). The activations
/// are rounded to int8 first ([`q8x`]'s policy, over the bytes of the experts a step can read:
/// one per (slot, token), at most all of them) when their columns are one dense matrix.
///
/// `glu`: `ctx` is a GLU's gate, and these are the up projection's mul_mat_id (same
/// activations and ids, weights of the same shape and dtype), the GLU expression and its
/// result: both products and the GLU in one dispatch (IdGlu), whose activations are rounded
/// once.
pub(in crate::ops) fn mul_mat_vec_id(
    ctx: &Ctx,
    glu: Option<(&Ctx, &'static str, Operand)>,
) -> Result<Option<Vec<Dispatch>>> {
    let (a, b, ids) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?);
    let dst = match &glu {
        Some((_, _, d)) => d.clone(),
        None => ctx.out(),
    };
    let cols = dst.layout.ne[1] * dst.layout.ne[2];
    let up = match &glu {
        Some((up, ..)) => {
            let wu = up.src(0)?;
            let same = up.node.srcs[1..] == ctx.node.srcs[1..]
                && wu.dtype == a.dtype
                && wu.layout.ne == a.layout.ne
                && windows::fits(up, &wu)
                && up.out().layout.ne == dst.layout.ne;
            if !same {
                return Ok(None);
            }
            Some(wu)
        }
        None => None,
    };
    let ok = unit_decoded(a.dtype)
        && unit_path(ctx, &a, &b)
        && a.layout.ne[3] == 1
        && b.layout.ne[3] == 1
        && windows::fits(ctx, &a)
        && dst.dtype == DType::F32
        && ids.dtype == DType::I32
        && (1..=MAX_GROUPS_PER_DIM).contains(&cols);
    if !ok {
        return Ok(None);
    }
    let (ea, eb, m) = (a.layout.ne, b.layout.ne, a.layout.ne[1]);
    // b's columns [K, ne1 · tokens] as one matrix, where they are evenly spaced.
    let mut flat = b.clone();
    flat.layout.ne = [eb[0], eb[1] * eb[2], 1, 1];
    let dense = eb[2] == 1 || b.layout.nb[2] == eb[1] * b.layout.nb[1];
    let weights = 1 + u64::from(up.is_some());
    let read = weights * weight_bytes(&a) / ea[2] * cols.min(ea[2]);
    let int8 = dense && q8x(ctx, a.dtype, read, &flat);
    let mut out = Vec::new();
    let scratch = quant_act(ctx, int8, &flat, None, &mut out)?;
    let epilogue = match glu {
        Some((_, expr, _)) => VecEpilogue::IdGlu { expr },
        None => VecEpilogue::Id,
    };
    let key = vec_key(
        a.dtype,
        1,
        epilogue,
        (ea[0] / 32, m, cpu_lanes(ctx.caps)),
        int8,
        false,
    );
    let rpw = vec_rpw(&key);
    let mut op = product_words(ctx, ea, [ea[0], 1, 1, 1], m, 0)?;
    op[2] = 1;
    op[5] = ctx.items(eb[1])?;
    op[6] = ctx.items(eb[1] * eb[2])?;
    let operands = [a, scratch.unwrap_or(b)]
        .into_iter()
        .chain(up)
        .chain([ids, dst])
        .collect::<Vec<_>>();
    let key = bind_weights(ctx, key, &operands);
    out.push(Dispatch {
        key,
        operands,
        op_words: op,
        items: ctx.items(m * cols)?,
        groups: ctx.grid(m.div_ceil(rpw), cols)?,
    });
    Ok(Some(out))
}
