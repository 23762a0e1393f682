//! Shape-changing copies: set and concat (copies into views of the result through the
//! element-wise copy kernel), repeat, pad (zeros or circular), diag, tri and add_id
//! (`shape.wgsl`), and upscale (`upscale.wgsl`). Dtypes follow ggml's WebGPU table: set and
//! concat f32 or i32, repeat f32 or i32 (i16 tensors cannot be built), pad, diag, tri and add_id
//! f32, upscale f32 or f16.

use wgllm_core::op::{ScaleMode, TriKind};
use wgllm_core::{DType, Layout, Result};

use super::elementwise::{map_key, COPY};
use super::{words, Ctx, Dispatch, Operand, WG_ELEMENTWISE};
use crate::kernels::{Interp, ShapeKind};
use crate::kernels::{Kernel, PipelineKey, OP_WORDS};

fn shape_key(kind: ShapeKind, dtypes: Vec<DType>) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Shape(kind),
        dtypes,
        wg: WG_ELEMENTWISE,
    }
}

fn upscale_key(interp: Interp, dtype: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Upscale(interp),
        dtypes: vec![dtype, dtype],
        wg: WG_ELEMENTWISE,
    }
}

/// The result seen through extents `ne`, byte strides `nb` and a byte offset.
fn out_view(ctx: &Ctx, ne: [u64; 4], nb: [u64; 4], offset: u64) -> Operand {
    Operand {
        layout: Layout { ne, nb, offset },
        ..ctx.out()
    }
}

/// A copy of `src` into `dst` (same element count, flat order), exact for i32.
pub(super) fn copy_into(ctx: &Ctx, src: Operand, dst: Operand) -> Result<Dispatch> {
    let n = src.layout.nelements();
    let key = map_key(COPY, src.dtype, dst.dtype);
    ctx.per_item(key, vec![src, dst], [0; OP_WORDS], n)
}

fn f32_or_i32(ctx: &Ctx, srcs: &[&Operand]) -> Result<()> {
    let d = ctx.out().dtype;
    ctx.require(
        matches!(d, DType::F32 | DType::I32) && srcs.iter().all(|s| s.dtype == d),
        "f32 or i32",
    )
}

fn f32_only(ctx: &Ctx, srcs: &[&Operand]) -> Result<()> {
    ctx.require(
        ctx.out().dtype == DType::F32 && srcs.iter().all(|s| s.dtype == DType::F32),
        "f32",
    )
}

/// ggml_set: `a` copied into the result, then `b` into the view at `offset` with strides `nb`.
pub(super) fn set(ctx: &Ctx, nb: [u64; 3], offset: u64) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    f32_or_i32(ctx, &[&a, &b])?;
    let es = dst.dtype.type_size() as u64;
    let view = out_view(ctx, b.layout.ne, [es, nb[0], nb[1], nb[2]], offset);
    Ok(vec![copy_into(ctx, a, dst)?, copy_into(ctx, b, view)?])
}

/// ggml_concat: `a` and `b` copied into the two parts of the result along `dim`.
pub(super) fn concat(ctx: &Ctx, dim: usize) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    f32_or_i32(ctx, &[&a, &b])?;
    let nb = dst.layout.nb;
    let skip = a.layout.ne[dim] * nb[dim];
    let first = out_view(ctx, a.layout.ne, nb, 0);
    let second = out_view(ctx, b.layout.ne, nb, skip);
    Ok(vec![copy_into(ctx, a, first)?, copy_into(ctx, b, second)?])
}

/// A one-source gather of `shape.wgsl` over the result.
fn gather(ctx: &Ctx, kind: ShapeKind, op: [u32; OP_WORDS]) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    let n = dst.layout.nelements();
    let key = shape_key(kind, vec![a.dtype, dst.dtype]);
    Ok(vec![ctx.per_item(key, vec![a, dst], op, n)?])
}

/// ggml_repeat.
pub(super) fn repeat(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    f32_or_i32(ctx, &[&ctx.src(0)?])?;
    gather(ctx, ShapeKind::Repeat, [0; OP_WORDS])
}

/// ggml_pad_ext (zeros, or circular); `rp` is implied by the result's extents.
pub(super) fn pad(ctx: &Ctx, lp: [u32; 4], circular: bool) -> Result<Vec<Dispatch>> {
    f32_only(ctx, &[&ctx.src(0)?])?;
    let mut op = [0; OP_WORDS];
    op[..4].copy_from_slice(&lp);
    gather(ctx, ShapeKind::Pad { circular }, op)
}

/// ggml_diag.
pub(super) fn diag(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    f32_only(ctx, &[&ctx.src(0)?])?;
    gather(ctx, ShapeKind::Diag, [0; OP_WORDS])
}

/// ggml_tri.
pub(super) fn tri(ctx: &Ctx, kind: TriKind) -> Result<Vec<Dispatch>> {
    f32_only(ctx, &[&ctx.src(0)?])?;
    let mut op = [0; OP_WORDS];
    op[0] = match kind {
        TriKind::Lower => 0,
        TriKind::LowerDiag => 1,
        TriKind::Upper => 2,
        TriKind::UpperDiag => 3,
    };
    gather(ctx, ShapeKind::Tri, op)
}

/// ggml_add_id: `srcs = [a, b, ids]`.
pub(super) fn add_id(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (a, b, ids, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    f32_only(ctx, &[&a, &b])?;
    ctx.require(ids.dtype == DType::I32, "f32 with i32 ids")?;
    let n = dst.layout.nelements();
    let key = shape_key(ShapeKind::AddId, add_id_dtypes());
    Ok(vec![ctx.per_item(
        key,
        vec![a, b, ids, dst],
        [0; OP_WORDS],
        n,
    )?])
}

fn add_id_dtypes() -> Vec<DType> {
    vec![DType::F32, DType::F32, DType::I32, DType::F32]
}

/// ggml_interpolate: scale factors and the sample offset computed in f32 as the CPU reference.
pub(super) fn upscale(ctx: &Ctx, mode: ScaleMode) -> Result<Vec<Dispatch>> {
    let (a, dst) = (ctx.src(0)?, ctx.out());
    ctx.require(
        matches!(dst.dtype, DType::F32 | DType::F16) && a.dtype == dst.dtype,
        "f32 or f16",
    )?;
    ctx.require_f16(&[dst.dtype])?;
    let (ne, ane) = (dst.layout.ne, a.layout.ne);
    let mut sf: [f32; 4] = [0, 1, 2, 3].map(|d| ne[d] as f32 / ane[d] as f32);
    let (interp, align) = match mode {
        ScaleMode::Nearest => (Interp::Nearest, false),
        ScaleMode::Bilinear { align_corners } => (Interp::Bilinear, align_corners),
        ScaleMode::Bicubic { align_corners } => (Interp::Bicubic, align_corners),
    };
    let mut offset = 0.5f32;
    if align {
        offset = 0.0;
        for d in 0..2 {
            if ne[d] > 1 && ane[d] > 1 {
                sf[d] = (ne[d] - 1) as f32 / (ane[d] - 1) as f32;
            }
        }
    }
    let op = words(&[sf[0], sf[1], sf[2], sf[3], offset]);
    let n = dst.layout.nelements();
    Ok(vec![ctx.per_item(
        upscale_key(interp, dst.dtype),
        vec![a, dst],
        op,
        n,
    )?])
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys = Vec::new();
    for d in [DType::F32, DType::I32] {
        keys.push(shape_key(ShapeKind::Repeat, vec![d, d]));
    }
    let f = vec![DType::F32, DType::F32];
    for kind in [
        ShapeKind::Pad { circular: false },
        ShapeKind::Pad { circular: true },
        ShapeKind::Diag,
        ShapeKind::Tri,
    ] {
        keys.push(shape_key(kind, f.clone()));
    }
    keys.push(shape_key(ShapeKind::AddId, add_id_dtypes()));
    for d in [DType::F32, DType::F16] {
        for i in [Interp::Nearest, Interp::Bilinear, Interp::Bicubic] {
            keys.push(upscale_key(i, d));
        }
    }
    keys
}
