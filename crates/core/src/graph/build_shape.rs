//! Builders for shape-changing copies: ggml_set, ggml_concat, ggml_repeat, ggml_pad_ext,
//! ggml_diag, ggml_tri, ggml_interpolate (upscale) and ggml_add_id.

use super::{can_repeat, Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::{Op, ScaleMode, TriKind};

impl Graph {
    /// Checks that `a` holds values a pure copy can move exactly (a float scalar, or I32 when
    /// `ints` allows it), returning its dtype and extents.
    fn shape_movable(
        &self,
        a: TensorId,
        op: &'static str,
        ints: bool,
    ) -> Result<(DType, [u64; MAX_DIMS])> {
        let n = self.try_node(a)?;
        if !(n.dtype.is_float() || ints && n.dtype == DType::I32) {
            let want = if ints { "a float or i32" } else { "a float" };
            return Err(Error::DType {
                op,
                dtypes: format!("needs {want} tensor, got {}", n.dtype),
            });
        }
        Ok((n.dtype, n.layout.ne))
    }

    /// A copy of `a` with `b` written into the view of it that starts at byte `offset` and has
    /// byte strides `nb` for dims 1..3 (ggml_set, not in place). Offsets and strides refer to the
    /// contiguous result, so they must be whole elements and the view must stay inside it.
    /// `a` and `b` share a dtype (a float or I32).
    pub fn set(&mut self, a: TensorId, b: TensorId, nb: [u64; 3], offset: u64) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "SET", true)?;
        let (db, eb) = self.shape_movable(b, "SET", true)?;
        if db != dtype {
            return Err(Error::DType {
                op: "SET",
                dtypes: format!("a is {dtype}, b is {db}"),
            });
        }
        let es = dtype.type_size() as u64;
        if !offset.is_multiple_of(es) || nb.iter().any(|s| !s.is_multiple_of(es)) {
            return Err(Error::shape(format!(
                "set: offset {offset} and strides {nb:?} must be multiples of the {es}-byte element"
            )));
        }
        let total = Layout::contiguous(dtype, ea)?.span_bytes(dtype);
        if eb.iter().product::<u64>() > 0 {
            let strides = [es, nb[0], nb[1], nb[2]];
            let end = (0..MAX_DIMS).try_fold(offset.checked_add(es), |acc, i| {
                Some(acc?.checked_add((eb[i] - 1).checked_mul(strides[i])?))
            });
            if !matches!(end.flatten(), Some(e) if e <= total) {
                return Err(Error::shape(format!(
                    "set: b {eb:?} with strides {nb:?} at offset {offset} reaches past the \
                     {total} bytes of a {ea:?}"
                )));
            }
        }
        let l = Layout::contiguous(dtype, ea)?;
        self.push(Op::Set { nb, offset }, vec![Some(a), Some(b)], dtype, l)
    }

    /// `a` and `b` joined along `dim` (ggml_concat): same dtype (a float or I32), equal extents
    /// in the other dims.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "CONCAT", true)?;
        let (db, eb) = self.shape_movable(b, "CONCAT", true)?;
        if db != dtype {
            return Err(Error::DType {
                op: "CONCAT",
                dtypes: format!("a is {dtype}, b is {db}"),
            });
        }
        if dim >= MAX_DIMS || (0..MAX_DIMS).any(|d| d != dim && ea[d] != eb[d]) {
            return Err(Error::shape(format!(
                "concat along dim {dim}: a {ea:?} and b {eb:?} must match in the other dims"
            )));
        }
        let mut ne = ea;
        ne[dim] = ea[dim]
            .checked_add(eb[dim])
            .ok_or_else(|| Error::shape("concat extent overflows"))?;
        let l = Layout::contiguous(dtype, ne)?;
        self.push(Op::Concat { dim }, vec![Some(a), Some(b)], dtype, l)
    }

    /// `a` tiled to extents `ne`, each a multiple of `a`'s (ggml_repeat / ggml_repeat_4d).
    pub fn repeat(&mut self, a: TensorId, ne: [u64; MAX_DIMS]) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "REPEAT", true)?;
        if !can_repeat(ea, ne) {
            return Err(Error::shape(format!("repeat: {ea:?} does not tile {ne:?}")));
        }
        let l = Layout::contiguous(dtype, ne)?;
        self.push(Op::Repeat, vec![Some(a)], dtype, l)
    }

    /// `a` with `lp[i]` values before and `rp[i]` after it in each dim (ggml_pad_ext): zeros, or
    /// with `circular` the values of the opposite edge (ggml_pad_ext_circular, which needs
    /// non-empty dims and `lp[i] <= ne[i]`). Float tensors only.
    pub fn pad(
        &mut self,
        a: TensorId,
        lp: [u32; MAX_DIMS],
        rp: [u32; MAX_DIMS],
        circular: bool,
    ) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "PAD", false)?;
        if circular && (0..MAX_DIMS).any(|i| ea[i] == 0 || u64::from(lp[i]) > ea[i]) {
            return Err(Error::shape(format!(
                "pad: circular padding {lp:?} needs non-empty dims at least as long, got {ea:?}"
            )));
        }
        let mut ne = ea;
        for i in 0..MAX_DIMS {
            ne[i] = ea[i] + u64::from(lp[i]) + u64::from(rp[i]);
        }
        let l = Layout::contiguous(dtype, ne)?;
        self.push(Op::Pad { lp, rp, circular }, vec![Some(a)], dtype, l)
    }

    /// Diagonal matrices from the rows of `a = [n, 1, b2, b3]`: result `[n, n, b2, b3]`
    /// (ggml_diag). Float tensors only.
    pub fn diag(&mut self, a: TensorId) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "DIAG", false)?;
        if ea[1] != 1 {
            return Err(Error::shape(format!(
                "diag needs rows [n, 1, b2, b3], got {ea:?}"
            )));
        }
        let l = Layout::contiguous(dtype, [ea[0], ea[0], ea[2], ea[3]])?;
        self.push(Op::Diag, vec![Some(a)], dtype, l)
    }

    /// One triangle of each square matrix of `a`, zeros elsewhere (ggml_tri): with column `i0`
    /// and row `i1`, `Lower` keeps `i0 < i1`, `LowerDiag` `i0 <= i1`, `Upper` `i0 > i1` and
    /// `UpperDiag` `i0 >= i1`. Float tensors only.
    pub fn tri(&mut self, a: TensorId, kind: TriKind) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "TRI", false)?;
        if ea[0] != ea[1] {
            return Err(Error::shape(format!(
                "tri needs square matrices, got {ea:?}"
            )));
        }
        let l = Layout::contiguous(dtype, ea)?;
        self.push(Op::Tri { kind }, vec![Some(a)], dtype, l)
    }

    /// `a` resized to extents `ne` (ggml_interpolate / ggml_upscale_ext). Dims 0 and 1 use
    /// `mode` (nearest, bilinear or bicubic, optionally aligning corners); dims 2 and 3 always
    /// take the nearest sample. Float tensors only; every extent non-zero.
    pub fn upscale(
        &mut self,
        a: TensorId,
        ne: [u64; MAX_DIMS],
        mode: ScaleMode,
    ) -> Result<TensorId> {
        let (dtype, ea) = self.shape_movable(a, "UPSCALE", false)?;
        if ne.contains(&0) || ea.contains(&0) {
            return Err(Error::shape(format!(
                "upscale from {ea:?} to {ne:?}: extents must be non-zero"
            )));
        }
        let l = Layout::contiguous(dtype, ne)?;
        self.push(Op::Upscale { mode }, vec![Some(a)], dtype, l)
    }

    /// `a[:, i1, i2] + b[:, ids[i1, i2]]` (ggml_add_id): `a` f32 `[n, n_used, n_tokens]`, `b` f32
    /// `[n, n_expert]`, `ids` I32 `[n_used, n_tokens]`. An id outside `0..n_expert` is a run-time
    /// error.
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let (na, nb, ni) = (self.try_node(a)?, self.try_node(b)?, self.try_node(ids)?);
        let (ea, eb, ei) = (na.layout.ne, nb.layout.ne, ni.layout.ne);
        if na.dtype != DType::F32 || nb.dtype != DType::F32 || ni.dtype != DType::I32 {
            return Err(Error::DType {
                op: "ADD_ID",
                dtypes: format!(
                    "a {}, b {}, ids {} (need f32, f32, i32)",
                    na.dtype, nb.dtype, ni.dtype
                ),
            });
        }
        if ea[0] != eb[0]
            || ea[1] != ei[0]
            || ea[2] != ei[1]
            || ea[3] != 1
            || eb[2] != 1
            || eb[3] != 1
            || ei[2] != 1
            || ei[3] != 1
        {
            return Err(Error::shape(format!(
                "add_id: a {ea:?}, b {eb:?}, ids {ei:?} (need a 3-D, b 2-D with a.ne0 == b.ne0, \
                 ids [a.ne1, a.ne2])"
            )));
        }
        let l = Layout::contiguous(DType::F32, ea)?;
        self.push(Op::AddId, vec![Some(a), Some(b), Some(ids)], DType::F32, l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_extents_follow_ggml() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [2, 3, 1, 1]).unwrap();
        let b = g.input("b", DType::F32, [2, 4, 1, 1]).unwrap();
        let t = g.concat(a, b, 1).unwrap();
        assert_eq!(g.ne(t), [2, 7, 1, 1]);
        assert!(g.concat(a, b, 0).is_err());
        assert!(g.concat(a, b, 4).is_err());
        let t = g.repeat(a, [4, 6, 2, 1]).unwrap();
        assert_eq!(g.ne(t), [4, 6, 2, 1]);
        assert!(g.repeat(a, [3, 3, 1, 1]).is_err());
        let p = g.pad(a, [1, 0, 0, 0], [2, 1, 0, 0], false).unwrap();
        assert_eq!(g.ne(p), [5, 4, 1, 1]);
        assert!(g.pad(a, [3, 0, 0, 0], [0; 4], true).is_err());
        assert!(g.diag(a).is_err());
        let v = g.input("v", DType::F32, [3, 1, 2, 1]).unwrap();
        let t = g.diag(v).unwrap();
        assert_eq!(g.ne(t), [3, 3, 2, 1]);
        assert!(g.tri(a, TriKind::Lower).is_err());
        assert!(g.upscale(a, [0, 1, 1, 1], ScaleMode::Nearest).is_err());
        let i = g.input("i", DType::I32, [2, 3, 1, 1]).unwrap();
        assert!(g.pad(i, [0; 4], [1, 0, 0, 0], false).is_err());
        assert!(g.concat(a, i, 0).is_err());
    }

    #[test]
    fn set_views_must_fit_and_align() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [4, 3, 1, 1]).unwrap();
        let b = g.input("b", DType::F32, [2, 2, 1, 1]).unwrap();
        assert!(g.set(a, b, [16, 48, 48], 8).is_ok());
        assert!(
            g.set(a, b, [16, 48, 48], 36).is_err(),
            "last row past the end"
        );
        assert!(g.set(a, b, [16, 48, 48], 6).is_err(), "misaligned");
        let h = g.input("h", DType::F16, [2, 2, 1, 1]).unwrap();
        assert!(matches!(
            g.set(a, h, [16, 48, 48], 0),
            Err(Error::DType { .. })
        ));
    }

    #[test]
    fn add_id_shapes() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [4, 2, 3, 1]).unwrap();
        let b = g.input("b", DType::F32, [4, 5, 1, 1]).unwrap();
        let ids = g.input("ids", DType::I32, [2, 3, 1, 1]).unwrap();
        let t = g.add_id(a, b, ids).unwrap();
        assert_eq!(g.ne(t), [4, 2, 3, 1]);
        let bad = g.input("bad", DType::I32, [3, 2, 1, 1]).unwrap();
        assert!(g.add_id(a, b, bad).is_err());
    }
}
