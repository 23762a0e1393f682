//! Builders for layout-only ops and data movement: view, reshape, permute, transpose, cpy, cont,
//! set_rows, get_rows.

use super::{Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::Op;

impl Graph {
    /// A view of `a` with explicit extents, byte strides and extra byte offset (ggml_view_4d).
    pub fn view(
        &mut self,
        a: TensorId,
        ne: [u64; MAX_DIMS],
        nb: [u64; MAX_DIMS],
        offset: u64,
    ) -> Result<TensorId> {
        let n = self.try_node(a)?;
        let l = n.layout.view(n.dtype, ne, nb, offset)?;
        self.push(Op::View, vec![Some(a)], n.dtype, l)
    }

    /// The same contiguous bytes with new extents (ggml_reshape_4d).
    pub fn reshape(&mut self, a: TensorId, ne: [u64; MAX_DIMS]) -> Result<TensorId> {
        let n = self.try_node(a)?;
        let l = n.layout.reshape(n.dtype, ne)?;
        self.push(Op::Reshape, vec![Some(a)], n.dtype, l)
    }

    /// Source dim `i` becomes result dim `axes[i]` (ggml_permute).
    pub fn permute(&mut self, a: TensorId, axes: [usize; MAX_DIMS]) -> Result<TensorId> {
        let n = self.try_node(a)?;
        if n.dtype.is_quantized() && axes[0] != 0 {
            return Err(Error::shape(format!(
                "cannot move dim 0 of a block-quantized {} tensor",
                n.dtype
            )));
        }
        let l = n.layout.permute(axes)?;
        self.push(Op::Permute { axes }, vec![Some(a)], n.dtype, l)
    }

    /// Swaps dims 0 and 1 (ggml_transpose).
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let n = self.try_node(a)?;
        if n.dtype.is_quantized() {
            return Err(Error::shape(format!(
                "cannot transpose a block-quantized {} tensor",
                n.dtype
            )));
        }
        let l = n.layout.transpose();
        self.push(Op::Transpose, vec![Some(a)], n.dtype, l)
    }

    /// Writes `src` into `dst` in place, converting dtype (ggml_cpy). Element counts must match;
    /// the result aliases `dst`.
    pub fn cpy(&mut self, src: TensorId, dst: TensorId) -> Result<TensorId> {
        let (s, d) = (self.try_node(src)?, self.try_node(dst)?);
        if s.layout.nelements() != d.layout.nelements() {
            return Err(Error::shape(format!(
                "cpy of {:?} into {:?}: element counts differ",
                s.layout.ne, d.layout.ne
            )));
        }
        let (dtype, layout) = (d.dtype, d.layout);
        self.push(Op::Cpy, vec![Some(dst), Some(src)], dtype, layout)
    }

    /// A contiguous copy of `a` converted to `dtype` (ggml_cont / ggml_cast).
    pub fn cont(&mut self, a: TensorId, dtype: DType) -> Result<TensorId> {
        let n = self.try_node(a)?;
        let l = Layout::contiguous(dtype, n.layout.ne)?;
        self.push(Op::Cont, vec![Some(a)], dtype, l)
    }

    /// A contiguous copy of `a` with new extents (ggml_cont_4d).
    pub fn cont_reshape(&mut self, a: TensorId, ne: [u64; MAX_DIMS]) -> Result<TensorId> {
        let dtype = self.try_node(a)?.dtype;
        let c = self.cont(a, dtype)?;
        self.reshape(c, ne)
    }

    /// Row `idx[i, j, k]` of `dst[:, :, j', k']` gets row `i` of `src` (ggml_set_rows); `idx` is
    /// I32 or I64 with extents `[src.ne1, i2, i3]` broadcast over `src`'s dims 2 and 3.
    pub fn set_rows(&mut self, dst: TensorId, src: TensorId, idx: TensorId) -> Result<TensorId> {
        let (d, s, i) = (
            self.try_node(dst)?,
            self.try_node(src)?,
            self.try_node(idx)?,
        );
        if !matches!(i.dtype, DType::I32 | DType::I64) {
            return Err(Error::DType {
                op: "SET_ROWS",
                dtypes: format!("indices must be i32 or i64, got {}", i.dtype),
            });
        }
        if d.layout.ne[0] != s.layout.ne[0] || i.layout.ne[0] != s.layout.ne[1] {
            return Err(Error::shape(format!(
                "set_rows: dst {:?}, src {:?}, idx {:?} (need dst.ne0 == src.ne0 and idx.ne0 == src.ne1)",
                d.layout.ne, s.layout.ne, i.layout.ne
            )));
        }
        if s.layout.ne[2] % i.layout.ne[1] != 0
            || s.layout.ne[3] % i.layout.ne[2] != 0
            || i.layout.ne[3] != 1
        {
            return Err(Error::shape(format!(
                "set_rows: idx {:?} does not broadcast over src {:?}",
                i.layout.ne, s.layout.ne
            )));
        }
        if d.layout.ne[2] != s.layout.ne[2] || d.layout.ne[3] != s.layout.ne[3] {
            return Err(Error::shape(format!(
                "set_rows: dst {:?} and src {:?} differ in dims 2,3",
                d.layout.ne, s.layout.ne
            )));
        }
        let (dtype, layout) = (d.dtype, d.layout);
        self.push(
            Op::SetRows,
            vec![Some(dst), Some(src), Some(idx)],
            dtype,
            layout,
        )
    }

    /// Rows of `table` picked by I32 `idx` (ggml_get_rows): result `[table.ne0, idx.ne0, idx.ne1,
    /// idx.ne2]` in f32 (i32 for an i32 table); quantized tables are dequantized.
    pub fn get_rows(&mut self, table: TensorId, idx: TensorId) -> Result<TensorId> {
        let (t, i) = (self.try_node(table)?, self.try_node(idx)?);
        if i.dtype != DType::I32 {
            return Err(Error::DType {
                op: "GET_ROWS",
                dtypes: format!("indices must be i32, got {}", i.dtype),
            });
        }
        if t.layout.ne[2] != i.layout.ne[1] && t.layout.ne[2] != 1 || i.layout.ne[3] != 1 {
            return Err(Error::shape(format!(
                "get_rows: table {:?} with idx {:?}",
                t.layout.ne, i.layout.ne
            )));
        }
        let out = if t.dtype == DType::I32 {
            DType::I32
        } else {
            DType::F32
        };
        let l = Layout::contiguous(
            out,
            [
                t.layout.ne[0],
                i.layout.ne[0],
                i.layout.ne[1],
                i.layout.ne[2],
            ],
        )?;
        self.push(Op::GetRows, vec![Some(table), Some(idx)], out, l)
    }
}
