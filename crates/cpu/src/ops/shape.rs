//! Shape-changing copies: set, concat, repeat, pad, diag, tri, upscale (interpolate), add_id.
//!
//! Pure copies go through [`gather`], which keeps I32 values exact; upscale and add_id compute in
//! f32.

use wgllm_core::layout::MAX_DIMS;
use wgllm_core::op::{ScaleMode, TriKind};
use wgllm_core::{DType, Error, Result};

use crate::store::Dense;
use crate::Ctx;

type Index = [usize; MAX_DIMS];

/// Flat position of `i` in a dense tensor of extents `ne`.
fn flat(ne: Index, i: Index) -> usize {
    ((i[3] * ne[2] + i[2]) * ne[1] + i[1]) * ne[0] + i[0]
}

/// Every index of extents `ne` in flat order.
fn indices(ne: Index) -> impl Iterator<Item = Index> {
    (0..ne[3]).flat_map(move |i3| {
        (0..ne[2]).flat_map(move |i2| {
            (0..ne[1]).flat_map(move |i1| (0..ne[0]).map(move |i0| [i0, i1, i2, i3]))
        })
    })
}

/// Extents of source `i`.
fn src_ne(ctx: &Ctx, i: usize) -> Result<Index> {
    Ok(ctx.src(i)?.ne())
}

/// Builds the result element by element: `map(i)` names the source (0 or 1) and the flat
/// element of it that result element `i` copies, or `None` for a zero. I32 results are copied
/// exactly; everything else goes through f32.
fn gather(ctx: &mut Ctx, nsrc: usize, map: impl Fn(Index) -> Option<(usize, usize)>) -> Result<()> {
    let ne = ctx.out_ne();
    let oob = || Error::shape("source element out of range");
    if ctx.node.dtype == DType::I32 {
        let srcs = (0..nsrc).map(|i| ctx.ints(i)).collect::<Result<Vec<_>>>()?;
        let out = indices(ne)
            .map(|i| match map(i) {
                Some((s, k)) => srcs[s].get(k).map(|&v| v as i32).ok_or_else(oob),
                None => Ok(0),
            })
            .collect::<Result<Vec<i32>>>()?;
        return ctx.write_i32(&out);
    }
    let srcs = (0..nsrc)
        .map(|i| ctx.dense(i))
        .collect::<Result<Vec<Dense>>>()?;
    let out = indices(ne)
        .map(|i| match map(i) {
            Some((s, k)) => srcs[s].data.get(k).copied().ok_or_else(oob),
            None => Ok(0.0),
        })
        .collect::<Result<Vec<f32>>>()?;
    ctx.write(&out)
}

/// Copies `src` into `dst` at the element positions `offset + j0 + j1·nb[0] + j2·nb[1] +
/// j3·nb[2]` (all in elements) for every index `j` of `ne`.
fn scatter_view<T: Copy>(
    dst: &mut [T],
    src: &[T],
    ne: Index,
    nb: [usize; 3],
    offset: usize,
) -> Result<()> {
    for (j, &v) in indices(ne).zip(src) {
        let at = offset + j[0] + j[1] * nb[0] + j[2] * nb[1] + j[3] * nb[2];
        *dst.get_mut(at)
            .ok_or_else(|| Error::shape("set view reaches past its destination"))? = v;
    }
    Ok(())
}

/// ggml_set: a copy of `a` with `b` written into the view at byte `offset` with byte strides
/// `nb` (dims 1..3) of the contiguous result.
pub(crate) fn set(ctx: &mut Ctx, nb: [u64; 3], offset: u64) -> Result<()> {
    let es = ctx.node.dtype.type_size() as u64;
    let nb = nb.map(|s| (s / es) as usize);
    let offset = (offset / es) as usize;
    let bne = src_ne(ctx, 1)?;
    if ctx.node.dtype == DType::I32 {
        let mut out: Vec<i32> = ctx.ints(0)?.into_iter().map(|v| v as i32).collect();
        let b: Vec<i32> = ctx.ints(1)?.into_iter().map(|v| v as i32).collect();
        scatter_view(&mut out, &b, bne, nb, offset)?;
        return ctx.write_i32(&out);
    }
    let mut out = ctx.dense(0)?.data;
    let b = ctx.dense(1)?;
    scatter_view(&mut out, &b.data, bne, nb, offset)?;
    ctx.write(&out)
}

/// ggml_concat: `a` then `b` along `dim`.
pub(crate) fn concat(ctx: &mut Ctx, dim: usize) -> Result<()> {
    let (ane, bne) = (src_ne(ctx, 0)?, src_ne(ctx, 1)?);
    gather(ctx, 2, |mut i| {
        if i[dim] < ane[dim] {
            Some((0, flat(ane, i)))
        } else {
            i[dim] -= ane[dim];
            Some((1, flat(bne, i)))
        }
    })
}

/// ggml_repeat: `a` tiled, `r[i] = a[i mod a.ne]`.
pub(crate) fn repeat(ctx: &mut Ctx) -> Result<()> {
    let ane = src_ne(ctx, 0)?;
    if ane.contains(&0) {
        return Err(Error::shape("repeat of an empty tensor"));
    }
    gather(ctx, 1, |i| {
        Some((0, flat(ane, [0, 1, 2, 3].map(|d| i[d] % ane[d]))))
    })
}

/// ggml_pad_ext: zeros around `a` (`lp` before, `rp` after), or with `circular` the wrapped
/// values `a[(i - lp) mod ne]`.
pub(crate) fn pad(ctx: &mut Ctx, lp: [u32; 4], _rp: [u32; 4], circular: bool) -> Result<()> {
    let ane = src_ne(ctx, 0)?;
    let lp = lp.map(|v| v as usize);
    if circular {
        if (0..MAX_DIMS).any(|d| ane[d] == 0 || lp[d] > ane[d]) {
            return Err(Error::shape("circular pad wider than its source"));
        }
        return gather(ctx, 1, |i| {
            Some((
                0,
                flat(ane, [0, 1, 2, 3].map(|d| (i[d] + ane[d] - lp[d]) % ane[d])),
            ))
        });
    }
    gather(ctx, 1, |i| {
        let inside = (0..MAX_DIMS).all(|d| i[d] >= lp[d] && i[d] - lp[d] < ane[d]);
        inside.then(|| (0, flat(ane, [0, 1, 2, 3].map(|d| i[d] - lp[d]))))
    })
}

/// ggml_diag: `r[i0, i1, i2, i3] = a[i0, 0, i2, i3]` on the diagonal, zero elsewhere.
pub(crate) fn diag(ctx: &mut Ctx) -> Result<()> {
    let ane = src_ne(ctx, 0)?;
    gather(ctx, 1, |[i0, i1, i2, i3]| {
        (i0 == i1).then(|| (0, flat(ane, [i0, 0, i2, i3])))
    })
}

/// ggml_tri: keeps the elements of column `i0`, row `i1` that `kind` selects.
pub(crate) fn tri(ctx: &mut Ctx, kind: TriKind) -> Result<()> {
    let ane = src_ne(ctx, 0)?;
    let keep: fn(usize, usize) -> bool = match kind {
        TriKind::Lower => |c, r| c < r,
        TriKind::LowerDiag => |c, r| c <= r,
        TriKind::Upper => |c, r| c > r,
        TriKind::UpperDiag => |c, r| c >= r,
    };
    gather(ctx, 1, |i| keep(i[0], i[1]).then(|| (0, flat(ane, i))))
}

/// The source coordinate of result coordinate `i` along one interpolated dim:
/// `(i + offset) / scale - offset`.
fn src_coord(i: usize, scale: f32, offset: f32) -> f32 {
    (i as f32 + offset) / scale - offset
}

/// Bicubic convolution weights with `a = -0.75` (PyTorch's), applied to four samples at
/// fractional position `t` past the second.
fn bicubic(p: [f32; 4], t: f32) -> f32 {
    const A: f32 = -0.75;
    let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    p[0] * far(t + 1.0) + p[1] * near(t) + p[2] * near(1.0 - t) + p[3] * far(2.0 - t)
}

/// ggml_interpolate (ggml_compute_forward_upscale_f32). Scale factors are `ne / src.ne` per
/// dim; dims 2 and 3 and the nearest mode take `src[i / scale]`. Bilinear and bicubic sample
/// at `(i + 0.5) / scale - 0.5` (with `align_corners`, at `i / scale` where dims 0 and 1 scale
/// by `(ne - 1) / (src.ne - 1)` when both exceed 1), clamping reads at the edges.
pub(crate) fn upscale(ctx: &mut Ctx, mode: ScaleMode) -> Result<()> {
    let a = ctx.dense(0)?;
    let ne = ctx.out_ne();
    if a.ne.contains(&0) {
        return Err(Error::shape("upscale of an empty tensor"));
    }
    let mut sf: [f32; 4] = [0, 1, 2, 3].map(|d| ne[d] as f32 / a.ne[d] as f32);
    let mut offset = 0.5f32;
    if let ScaleMode::Bilinear {
        align_corners: true,
    }
    | ScaleMode::Bicubic {
        align_corners: true,
    } = mode
    {
        offset = 0.0;
        for d in 0..2 {
            if ne[d] > 1 && a.ne[d] > 1 {
                sf[d] = (ne[d] - 1) as f32 / (a.ne[d] - 1) as f32;
            }
        }
    }
    // Nearest source index along dim d (truncating, as ggml's integer conversion).
    let nearest = |i: usize, d: usize| ((i as f32 / sf[d]) as usize).min(a.ne[d] - 1);
    // Reads src at a possibly out-of-range (x, y), clamped to the edges.
    let at = |x: i64, y: i64, i2: usize, i3: usize| {
        let x = x.clamp(0, a.ne[0] as i64 - 1) as usize;
        let y = y.clamp(0, a.ne[1] as i64 - 1) as usize;
        a.at(x, y, i2, i3)
    };
    let out: Vec<f32> = indices(ne)
        .map(|[i0, i1, i2, i3]| {
            let (j2, j3) = (nearest(i2, 2), nearest(i3, 3));
            match mode {
                ScaleMode::Nearest => a.at(nearest(i0, 0), nearest(i1, 1), j2, j3),
                ScaleMode::Bilinear { .. } => {
                    let (x, y) = (src_coord(i0, sf[0], offset), src_coord(i1, sf[1], offset));
                    let clamp_idx = |v: i64, n: usize| v.clamp(0, n as i64 - 1);
                    let (x0, y0) = (
                        clamp_idx(x.floor() as i64, a.ne[0]),
                        clamp_idx(y.floor() as i64, a.ne[1]),
                    );
                    let (x1, y1) = (
                        clamp_idx(x.floor() as i64 + 1, a.ne[0]),
                        clamp_idx(y.floor() as i64 + 1, a.ne[1]),
                    );
                    let dx = (x - x0 as f32).clamp(0.0, 1.0);
                    let dy = (y - y0 as f32).clamp(0.0, 1.0);
                    at(x0, y0, j2, j3) * (1.0 - dx) * (1.0 - dy)
                        + at(x1, y0, j2, j3) * dx * (1.0 - dy)
                        + at(x0, y1, j2, j3) * (1.0 - dx) * dy
                        + at(x1, y1, j2, j3) * dx * dy
                }
                ScaleMode::Bicubic { .. } => {
                    let (x, y) = (src_coord(i0, sf[0], offset), src_coord(i1, sf[1], offset));
                    let (x0, y0) = (x.floor() as i64, y.floor() as i64);
                    let (dx, dy) = (x - x0 as f32, y - y0 as f32);
                    let row =
                        |yo: i64| bicubic([-1, 0, 1, 2].map(|xo| at(x0 + xo, y0 + yo, j2, j3)), dx);
                    bicubic([row(-1), row(0), row(1), row(2)], dy)
                }
            }
        })
        .collect();
    ctx.write(&out)
}

/// ggml_add_id: `r[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]]`.
pub(crate) fn add_id(ctx: &mut Ctx) -> Result<()> {
    let a = ctx.dense(0)?;
    let b = ctx.dense(1)?;
    let ids = ctx.ints(2)?;
    let [n, n1, n2, n3] = a.ne;
    if ids.len() != n1 * n2 || b.ne[0] != n {
        return Err(Error::shape("add_id sources do not match"));
    }
    let mut out = a.data.clone();
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                let id = ids[i2 * n1 + i1];
                let e = usize::try_from(id)
                    .ok()
                    .filter(|&e| e < b.ne[1])
                    .ok_or_else(|| {
                        Error::shape(format!("add_id index {id} out of range 0..{}", b.ne[1]))
                    })?;
                let o = a.idx(0, i1, i2, i3);
                for (r, &bv) in out[o..o + n].iter_mut().zip(b.row(e, 0, 0)) {
                    *r += bv;
                }
            }
        }
    }
    ctx.write(&out)
}
