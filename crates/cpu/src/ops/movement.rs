//! Data movement: cpy (in place, converting), cont, get_rows, set_rows.

use wgllm_core::{DType, Error, Result};

use crate::Ctx;

/// ggml_cpy: the source's values in flat element order, written into the destination view.
pub(crate) fn cpy(ctx: &mut Ctx) -> Result<()> {
    let src = ctx.dense(1)?;
    ctx.write(&src.data)
}

/// ggml_cont / ggml_cast: a contiguous (possibly converted) copy.
pub(crate) fn cont(ctx: &mut Ctx) -> Result<()> {
    if ctx.src_dtype(0)?.is_int() && ctx.node.dtype == DType::I32 {
        let v: Vec<i32> = ctx.ints(0)?.into_iter().map(|x| x as i32).collect();
        return ctx.write_i32(&v);
    }
    let src = ctx.dense(0)?;
    ctx.write(&src.data)
}

fn row_index(v: i64, n: usize, what: &str) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&r| r < n)
        .ok_or_else(|| Error::shape(format!("{what} index {v} out of range 0..{n}")))
}

/// ggml_get_rows: `dst[:, i10, i11, i12] = table[:, idx[i10, i11, i12], i11 % ne02, i12 % ne03]`.
pub(crate) fn get_rows(ctx: &mut Ctx) -> Result<()> {
    let table = ctx.src(0)?;
    let tne = table.ne();
    let idx = ctx.src(1)?;
    let ine = idx.ne();
    let ids = idx.dense_i64()?;
    let ne0 = tne[0];
    let mut out = vec![0f32; ne0 * ids.len()];
    let is_int = table.dtype.is_int();
    for (k, &r) in ids.iter().enumerate() {
        let (i11, i12) = ((k / ine[0]) % ine[1], k / (ine[0] * ine[1]));
        let r = row_index(r, tne[1], "get_rows")?;
        let dst = &mut out[k * ne0..(k + 1) * ne0];
        if is_int {
            for (d, v) in dst
                .iter_mut()
                .zip(table.row_i64(r, i11 % tne[2], i12 % tne[3])?)
            {
                *d = v as f32;
            }
        } else {
            table.row_f32(r, i11 % tne[2], i12 % tne[3], dst)?;
        }
    }
    if ctx.node.dtype == DType::I32 {
        let v: Vec<i32> = out.iter().map(|&x| x as i32).collect();
        return ctx.write_i32(&v);
    }
    ctx.write(&out)
}

/// ggml_set_rows: `dst[:, idx[i, i02 % n1, i03 % n2], i02, i03] = src[:, i, i02, i03]`, only
/// those rows written.
pub(crate) fn set_rows(ctx: &mut Ctx) -> Result<()> {
    let dne = ctx.out_ne();
    let src = ctx.dense(1)?;
    let idx = ctx.src(2)?;
    let ine = idx.ne();
    let ids = idx.dense_i64()?;
    let mut data = vec![0f32; dne.iter().product()];
    let mut rows = Vec::new();
    for i03 in 0..src.ne[3] {
        for i02 in 0..src.ne[2] {
            for i in 0..src.ne[1] {
                let k = ((i03 % ine[2]) * ine[1] + (i02 % ine[1])) * ine[0] + i;
                let r = row_index(ids[k], dne[1], "set_rows")?;
                let flat = (i03 * dne[2] + i02) * dne[1] + r;
                data[flat * dne[0]..(flat + 1) * dne[0]].copy_from_slice(src.row(i, i02, i03));
                rows.push(flat);
            }
        }
    }
    ctx.write_rows(&data, &rows)
}
