//! Matrix products: mul_mat with weights in f32, f16, bf16 or any block format `quant.wgsl`
//! decodes (decoded in registers, never into a scratch buffer), f32 accumulation, batched with
//! the weight broadcast over the activation's dims 2 and 3; a weight over the binding limit is
//! split into windows of rows (see `windows.rs`).

use wgllm_core::{DType, Result};

use super::rows::QUANTS;
use super::{windows, Ctx, Dispatch};
use crate::shaders::{Kernel, PipelineKey};

/// Invocations per mul_mat workgroup (a power of two: the reduction halves it).
const WG: u32 = 64;
/// Output columns per workgroup.
const TN: u32 = 4;

fn key(a: DType, b: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::MulMat { tn: TN },
        dtypes: vec![a, b, DType::F32],
        wg: WG,
    }
}

fn weight_ok(a: DType) -> bool {
    matches!(a, DType::F32 | DType::F16 | DType::BF16) || QUANTS.contains(&a)
}

/// ggml_mul_mat: `srcs = [a, b]`, result `[a.ne1, b.ne1, b.ne2, b.ne3]` in f32.
pub(super) fn mul_mat(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        dst.dtype == DType::F32
            && (b.dtype == DType::F32 && weight_ok(a.dtype)
                || b.dtype == DType::F16 && a.dtype == DType::F16),
        "f32 activations with f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K, q8_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs, mxfp4 weights; f16 x f16",
    )?;
    ctx.require_f16(&[a.dtype, b.dtype])?;
    let (ea, eb) = (a.layout.ne, b.layout.ne);
    let (k, n) = (ea[0], eb[1]);
    let tiles = n.div_ceil(u64::from(TN));
    // A weight over the binding limit runs as one dispatch per window of its rows, each writing
    // the matching rows (dim 0) of the result.
    let mut out = Vec::new();
    for w in windows::row_windows(ctx, &a)? {
        let m = w.operand.layout.ne[1];
        let mut d = dst.clone();
        d.layout.ne[0] = m;
        d.layout.offset += w.first_row * d.layout.nb[0];
        let op = [
            ctx.items(k)?,
            ctx.items(m)?,
            ctx.items(n)?,
            ctx.items(eb[2] / ea[2])?,
            ctx.items(eb[3] / ea[3])?,
            ctx.items(tiles)?,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        out.push(Dispatch {
            key: key(a.dtype, b.dtype),
            operands: vec![w.operand, b.clone(), d],
            op_words: op,
            items: ctx.items(m * n * eb[2] * eb[3])?,
            groups: ctx.grid(m * tiles, eb[2] * eb[3])?,
        });
    }
    Ok(out)
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys: Vec<PipelineKey> = [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
        .map(|a| key(a, DType::F32))
        .collect();
    keys.push(key(DType::F16, DType::F16));
    keys
}
