//! Builders for the neural-network ops: normalizations (ggml_rms_norm, ggml_norm, ggml_l2_norm),
//! ggml_soft_max_ext with mask, ALiBi and sinks, RoPE (ggml_rope_ext, ggml_rope_multi) and the
//! gated linear units (ggml_glu, ggml_glu_split).

use super::{Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::op::{GluOp, Op, RopeMode, RopeParams};

impl Graph {
    /// A per-row op over an f32 tensor whose result has `a`'s extents (norms, softmax).
    fn nn_f32_rows(
        &mut self,
        a: TensorId,
        op: Op,
        srcs: Vec<Option<TensorId>>,
    ) -> Result<TensorId> {
        let n = self.try_node(a)?;
        if n.dtype != DType::F32 {
            return Err(Error::DType {
                op: op.name(),
                dtypes: format!("needs an f32 tensor, got {}", n.dtype),
            });
        }
        let l = Layout::contiguous(DType::F32, n.layout.ne)?;
        self.push(op, srcs, DType::F32, l)
    }

    fn nn_norm(&mut self, a: TensorId, op: Op, eps: f32) -> Result<TensorId> {
        if eps.is_nan() || eps < 0.0 {
            return Err(Error::shape(format!(
                "{}: eps must be >= 0, got {eps}",
                op.name()
            )));
        }
        self.nn_f32_rows(a, op, vec![Some(a)])
    }

    /// `x / sqrt(mean(x²) + eps)` over each row of dim 0 (ggml_rms_norm); f32 only.
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.nn_norm(a, Op::RmsNorm { eps }, eps)
    }

    /// `(x - mean) / sqrt(var + eps)` over each row of dim 0, without affine parameters
    /// (ggml_norm); f32 only.
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.nn_norm(a, Op::Norm { eps }, eps)
    }

    /// `x / max(‖x‖₂, eps)` over each row of dim 0 (ggml_l2_norm); f32 only.
    pub fn l2_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.nn_norm(a, Op::L2Norm { eps }, eps)
    }

    /// Softmax of each row of `a·scale + slope·mask` (ggml_soft_max_ext +
    /// ggml_soft_max_add_sinks).
    ///
    /// - `a`: f32 `[n, rows, n_head, batch]`.
    /// - `mask`: f32 or f16 `[n, >= rows, m2, m3]` with `n_head % m2 == 0` and `batch % m3 == 0`;
    ///   row `(i1, i2, i3)` adds mask row `(i1, i2 % m2, i3 % m3)`.
    /// - ALiBi: when `max_bias > 0` (a mask is then required) head `h` scales the mask by
    ///   `m0^(h+1)` for `h < n_head_log2`, else `m1^(2(h - n_head_log2) + 1)`, with
    ///   `n_head_log2` the largest power of two `<= n_head`, `m0 = 2^(-max_bias/n_head_log2)` and
    ///   `m1 = 2^(-max_bias/2/n_head_log2)`; otherwise the slope is 1.
    /// - `sinks`: f32 `[n_head]`, an extra (unscaled) logit per head that joins the denominator
    ///   only.
    ///
    /// The result is f32 with `a`'s extents.
    pub fn soft_max(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        let ea = self.try_node(a)?.layout.ne;
        if let Some(m) = mask {
            let nm = self.try_node(m)?;
            let em = nm.layout.ne;
            if !matches!(nm.dtype, DType::F32 | DType::F16) {
                return Err(Error::DType {
                    op: "SOFT_MAX",
                    dtypes: format!("mask must be f32 or f16, got {}", nm.dtype),
                });
            }
            if em[0] != ea[0]
                || em[1] < ea[1]
                || em[2] == 0
                || em[3] == 0
                || ea[2] % em[2] != 0
                || ea[3] % em[3] != 0
            {
                return Err(Error::shape(format!(
                    "soft_max: mask {em:?} for a {ea:?} (need mask.ne0 == a.ne0, mask.ne1 >= \
                     a.ne1, mask.ne2/ne3 dividing a.ne2/ne3)"
                )));
            }
        } else if max_bias > 0.0 {
            return Err(Error::shape("soft_max: ALiBi (max_bias > 0) needs a mask"));
        }
        if let Some(s) = sinks {
            let ns = self.try_node(s)?;
            if ns.dtype != DType::F32 || ns.layout.ne != [ea[2], 1, 1, 1] {
                return Err(Error::shape(format!(
                    "soft_max: sinks must be f32 [{}] (one per head), got {} {:?}",
                    ea[2], ns.dtype, ns.layout.ne
                )));
            }
        }
        self.nn_f32_rows(
            a,
            Op::SoftMax { scale, max_bias },
            vec![Some(a), mask, sinks],
        )
    }

    /// Rotary position embedding (ggml_rope_ext; ggml_rope_multi for the multi-section and
    /// vision modes).
    ///
    /// - `x`: f32 or f16 `[head_dim, n_head, n_tokens, batch]`, any strides; the result has its
    ///   dtype and extents.
    /// - `pos`: I32 `[n_tokens]`, or `[4·n_tokens]` (sections t, h, w, e one after the other) for
    ///   `MultiSection`, `InterleavedMultiSection` and `Vision`.
    /// - `freq_factors`: f32, one divisor per rotated pair (`n_dims/2` of them; `n_dims` in the
    ///   vision mode, which rotates the whole head).
    ///
    /// `n_dims` is even and at most `head_dim`; dims past `n_dims` pass through unchanged. The
    /// vision mode needs `n_dims == head_dim / 2` and `head_dim` even; the multi-section modes
    /// need sections with a positive sum no larger than `head_dim`. YaRN follows
    /// ggml_rope_yarn_corr_dims and rope_yarn.
    pub fn rope(
        &mut self,
        x: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        p: RopeParams,
    ) -> Result<TensorId> {
        let (nx, np) = (self.try_node(x)?, self.try_node(pos)?);
        let (ex, ep) = (nx.layout.ne, np.layout.ne);
        if !matches!(nx.dtype, DType::F32 | DType::F16) || np.dtype != DType::I32 {
            return Err(Error::DType {
                op: "ROPE",
                dtypes: format!(
                    "x {}, positions {} (x must be f32 or f16, positions i32)",
                    nx.dtype, np.dtype
                ),
            });
        }
        let multi = matches!(
            p.mode,
            RopeMode::MultiSection | RopeMode::InterleavedMultiSection | RopeMode::Vision
        );
        let want_pos = if multi {
            ex[2].checked_mul(4)
        } else {
            Some(ex[2])
        };
        if Some(ep[0]) != want_pos || ep[1] != 1 || ep[2] != 1 || ep[3] != 1 {
            return Err(Error::shape(format!(
                "rope: positions {ep:?} for x {ex:?} (need a vector of {} per token)",
                if multi { 4 } else { 1 }
            )));
        }
        let n_dims = u64::from(p.n_dims);
        if n_dims % 2 != 0 || n_dims > ex[0] {
            return Err(Error::shape(format!(
                "rope: n_dims {n_dims} must be even and at most head_dim {}",
                ex[0]
            )));
        }
        if p.mode == RopeMode::Vision && ex[0] != 2 * n_dims {
            return Err(Error::shape(format!(
                "rope: the vision mode rotates whole heads, so n_dims {n_dims} must be half of \
                 head_dim {}",
                ex[0]
            )));
        }
        if multi {
            let s = p.sections.map(u64::from);
            let sum: u64 = s.iter().sum();
            if s[..3].iter().all(|&v| v == 0) || sum > ex[0] {
                return Err(Error::shape(format!(
                    "rope: sections {:?} need a non-zero t/h/w section and a sum <= head_dim {}",
                    p.sections, ex[0]
                )));
            }
        }
        if let Some(f) = freq_factors {
            let nf = self.try_node(f)?;
            let pairs = if p.mode == RopeMode::Vision {
                n_dims
            } else {
                n_dims / 2
            };
            if nf.dtype != DType::F32 || nf.layout.ne[0] < pairs || nf.layout.nrows() != 1 {
                return Err(Error::shape(format!(
                    "rope: freq_factors must be an f32 vector of at least {pairs} values, got {} \
                     {:?}",
                    nf.dtype, nf.layout.ne
                )));
            }
        }
        let dtype = nx.dtype;
        let l = Layout::contiguous(dtype, ex)?;
        self.push(
            Op::Rope(p),
            vec![Some(x), Some(pos), freq_factors],
            dtype,
            l,
        )
    }

    /// A gated linear unit over the two halves of each row (ggml_glu): `f(x)·g` with `x` the first
    /// half and `g` the second (exchanged when `swapped`). `a` is f32 or f16 with an even, non-zero
    /// `ne0`; the result is `[ne0/2, ne1, ne2, ne3]` in `a`'s dtype.
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> Result<TensorId> {
        let n = self.try_node(a)?;
        let ne = n.layout.ne;
        Self::nn_glu_dtype(op, n.dtype, n.dtype)?;
        if ne[0] == 0 || ne[0] % 2 != 0 {
            return Err(Error::shape(format!(
                "{}: fused halves need an even, non-zero ne0, got {ne:?}",
                op.name()
            )));
        }
        let dtype = n.dtype;
        let l = Layout::contiguous(dtype, [ne[0] / 2, ne[1], ne[2], ne[3]])?;
        self.push(Op::Glu { op, swapped }, vec![Some(a)], dtype, l)
    }

    /// A gated linear unit of two tensors (ggml_glu_split): `f(a)·b`. `a` and `b` have the same
    /// extents and dtype (f32 or f16); so does the result.
    pub fn glu_split(&mut self, a: TensorId, b: TensorId, op: GluOp) -> Result<TensorId> {
        let (na, nb) = (self.try_node(a)?, self.try_node(b)?);
        Self::nn_glu_dtype(op, na.dtype, nb.dtype)?;
        if na.layout.ne != nb.layout.ne {
            return Err(Error::shape(format!(
                "{}: a {:?} and b {:?} must have the same extents",
                op.name(),
                na.layout.ne,
                nb.layout.ne
            )));
        }
        let dtype = na.dtype;
        let l = Layout::contiguous(dtype, na.layout.ne)?;
        let swapped = false;
        self.push(Op::Glu { op, swapped }, vec![Some(a), Some(b)], dtype, l)
    }

    fn nn_glu_dtype(op: GluOp, a: DType, b: DType) -> Result<()> {
        if a != b || !matches!(a, DType::F32 | DType::F16) {
            return Err(Error::DType {
                op: op.name(),
                dtypes: format!("{a}, {b} (both f32 or both f16)"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: RopeMode, n_dims: u32) -> RopeParams {
        RopeParams::new(mode, n_dims)
    }

    #[test]
    fn norms_and_softmax_check_dtypes_and_masks() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [8, 3, 2, 1]).unwrap();
        let h = g.input("h", DType::F16, [8, 3, 2, 1]).unwrap();
        let t = g.rms_norm(a, 1e-6).unwrap();
        assert_eq!(g.ne(t), [8, 3, 2, 1]);
        assert!(matches!(g.norm(h, 1e-5), Err(Error::DType { .. })));
        assert!(g.l2_norm(a, f32::NAN).is_err());
        let m = g.input("m", DType::F16, [8, 4, 1, 1]).unwrap();
        let s = g.input("s", DType::F32, [2, 1, 1, 1]).unwrap();
        assert!(g.soft_max(a, Some(m), Some(s), 0.5, 8.0).is_ok());
        let short = g.input("short", DType::F16, [8, 2, 1, 1]).unwrap();
        assert!(g.soft_max(a, Some(short), None, 1.0, 0.0).is_err());
        assert!(
            g.soft_max(a, None, None, 1.0, 8.0).is_err(),
            "ALiBi needs a mask"
        );
        assert!(g.soft_max(a, None, Some(m), 1.0, 0.0).is_err());
    }

    #[test]
    fn rope_validates_positions_dims_and_sections() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [8, 2, 3, 1]).unwrap();
        let pos = g.input("pos", DType::I32, [3, 1, 1, 1]).unwrap();
        let pos4 = g.input("pos4", DType::I32, [12, 1, 1, 1]).unwrap();
        assert!(g.rope(x, pos, None, params(RopeMode::Neox, 8)).is_ok());
        assert!(g.rope(x, pos, None, params(RopeMode::Normal, 7)).is_err());
        assert!(g.rope(x, pos, None, params(RopeMode::Normal, 10)).is_err());
        assert!(g.rope(x, pos4, None, params(RopeMode::Normal, 8)).is_err());
        let mut mp = params(RopeMode::MultiSection, 8);
        assert!(g.rope(x, pos4, None, mp).is_err(), "sections all zero");
        mp.sections = [2, 1, 1, 0];
        assert!(g.rope(x, pos4, None, mp).is_ok());
        assert!(g.rope(x, pos, None, mp).is_err());
        let mut vp = params(RopeMode::Vision, 8);
        vp.sections = [2, 2, 0, 0];
        assert!(
            g.rope(x, pos4, None, vp).is_err(),
            "vision needs n_dims = head_dim/2"
        );
        vp.n_dims = 4;
        assert!(g.rope(x, pos4, None, vp).is_ok());
        let ff = g.input("ff", DType::F32, [3, 1, 1, 1]).unwrap();
        assert!(g.rope(x, pos, Some(ff), params(RopeMode::Neox, 8)).is_err());
        assert!(g.rope(x, pos, Some(ff), params(RopeMode::Neox, 6)).is_ok());
    }

    #[test]
    fn glu_halves_and_split_extents() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F16, [8, 3, 1, 1]).unwrap();
        let r = g.glu(a, GluOp::Swiglu, true).unwrap();
        assert_eq!((g.ne(r), g.dtype(r)), ([4, 3, 1, 1], DType::F16));
        let odd = g.input("odd", DType::F32, [7, 3, 1, 1]).unwrap();
        assert!(g.glu(odd, GluOp::Reglu, false).is_err());
        let b = g.input("b", DType::F32, [8, 3, 1, 1]).unwrap();
        assert!(matches!(
            g.glu_split(a, b, GluOp::Geglu),
            Err(Error::DType { .. })
        ));
        let c = g.input("c", DType::F16, [8, 3, 1, 1]).unwrap();
        let t = g.glu_split(a, c, GluOp::Geglu).unwrap();
        assert_eq!(g.ne(t), [8, 3, 1, 1]);
    }
}
