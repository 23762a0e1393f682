//! Builders for element-wise math and matrix products: binary ops with broadcast, unary ops,
//! mul_mat.

use super::{Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::op::{BinaryOp, Op, UnaryOp};

/// True when `b`'s extents tile `a`'s (each of a's extents is a multiple of b's): ggml_can_repeat.
pub fn can_repeat(b: [u64; 4], a: [u64; 4]) -> bool {
    (0..4).all(|i| b[i] != 0 && a[i].is_multiple_of(b[i]))
}

impl Graph {
    /// `a op b` with `b` broadcast over `a`; the result has `a`'s dtype and extents.
    pub fn binary(&mut self, a: TensorId, b: TensorId, op: BinaryOp) -> Result<TensorId> {
        let (na, nb) = (self.try_node(a)?, self.try_node(b)?);
        if !can_repeat(nb.layout.ne, na.layout.ne) {
            return Err(Error::shape(format!(
                "{:?}: {:?} does not broadcast to {:?}",
                op, nb.layout.ne, na.layout.ne
            )));
        }
        if na.dtype.is_quantized() || nb.dtype.is_quantized() {
            return Err(Error::DType {
                op: Op::Binary(op).name(),
                dtypes: format!("{}, {}", na.dtype, nb.dtype),
            });
        }
        let dtype = na.dtype;
        let l = Layout::contiguous(dtype, na.layout.ne)?;
        self.push(Op::Binary(op), vec![Some(a), Some(b)], dtype, l)
    }

    /// `a + b` (broadcast).
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(a, b, BinaryOp::Add)
    }

    /// `a * b` (broadcast).
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(a, b, BinaryOp::Mul)
    }

    /// `f(a)` element-wise; the result has `a`'s dtype and extents, contiguous.
    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        let n = self.try_node(a)?;
        if !n.dtype.is_float() {
            return Err(Error::DType {
                op: op.name(),
                dtypes: n.dtype.to_string(),
            });
        }
        let dtype = n.dtype;
        let l = Layout::contiguous(dtype, n.layout.ne)?;
        self.push(Op::Unary(op), vec![Some(a)], dtype, l)
    }

    /// `r[i, j] = Σ_k a[k, i] · b[k, j]` in f32 (ggml_mul_mat); `a` (any dtype, the weight) is
    /// broadcast over `b`'s dims 2 and 3.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (na, nb) = (self.try_node(a)?, self.try_node(b)?);
        let (ea, eb) = (na.layout.ne, nb.layout.ne);
        if ea[0] != eb[0] || eb[2] % ea[2] != 0 || eb[3] % ea[3] != 0 {
            return Err(Error::shape(format!("mul_mat: a {ea:?} and b {eb:?} (need a.ne0 == b.ne0, b.ne2/3 multiples of a.ne2/3)")));
        }
        if !matches!(nb.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::DType {
                op: "MUL_MAT",
                dtypes: format!("{} x {}", na.dtype, nb.dtype),
            });
        }
        let l = Layout::contiguous(DType::F32, [ea[1], eb[1], eb[2], eb[3]])?;
        self.push(Op::MulMat, vec![Some(a), Some(b)], DType::F32, l)
    }
}

impl Graph {
    fn same_shape_float(&mut self, a: TensorId, op: Op) -> Result<TensorId> {
        let n = self.try_node(a)?;
        if !n.dtype.is_float() {
            return Err(Error::DType {
                op: op.name(),
                dtypes: n.dtype.to_string(),
            });
        }
        let dtype = n.dtype;
        let l = Layout::contiguous(dtype, n.layout.ne)?;
        self.push(op, vec![Some(a)], dtype, l)
    }

    /// Clamps every value to `[min, max]` (ggml_clamp).
    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> Result<TensorId> {
        self.same_shape_float(a, Op::Clamp { min, max })
    }

    /// `a·scale + bias` (ggml_scale_bias).
    pub fn scale(&mut self, a: TensorId, scale: f32, bias: f32) -> Result<TensorId> {
        self.same_shape_float(a, Op::Scale { scale, bias })
    }

    /// A tensor of `a`'s extents filled with `value` (ggml_fill).
    pub fn fill(&mut self, a: TensorId, value: f32) -> Result<TensorId> {
        self.same_shape_float(a, Op::Fill { value })
    }
}
