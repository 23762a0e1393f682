//! Builders for attention and expert routing: flash_attn_ext, mul_mat_id.

use super::{Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::op::Op;

/// K/V dtypes flash attention reads (quantized rows are decoded one row at a time).
const KV_DTYPES: [DType; 5] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
];

impl Graph {
    /// Fused attention (ggml_flash_attn_ext + ggml_flash_attn_ext_add_sinks).
    ///
    /// - `q`: f32 `[d, n_q, n_head, batch]`
    /// - `k`: `[d, n_kv, n_head_kv, batch]`, `v`: `[dv, n_kv, n_head_kv, batch]` in f32, f16,
    ///   bf16, q8_0 or q4_0; any strides (views of a cache), quantized rows contiguous.
    ///   `n_head % n_head_kv == 0` (GQA: query head `h` reads kv head `h / (n_head / n_head_kv)`).
    /// - `mask`: f16 or f32 `[n_kv, n_q_padded >= n_q, m2, m3]`, `n_head % m2 == 0`,
    ///   `batch % m3 == 0`; query `i` of head `h`, batch `b` reads row `(i, h % m2, b % m3)`.
    /// - `sinks`: f32 `[n_head]`, one extra logit per head that joins the softmax denominator
    ///   only.
    ///
    /// Each logit is `s = scale·q·k`, then `s = softcap·tanh(s/softcap)` when `logit_softcap !=
    /// 0`, then `s += slope_h·mask` (ALiBi slope from `max_bias`, 1 when `max_bias == 0`). Keys
    /// whose mask is -inf are skipped; a row with every key masked (and no sink) is zeros. The
    /// result is f32 `[dv, n_head, n_q, batch]` (ggml's permuted layout).
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    ) -> Result<TensorId> {
        let (nq, nk, nv) = (self.try_node(q)?, self.try_node(k)?, self.try_node(v)?);
        let (eq, ek, ev) = (nq.layout.ne, nk.layout.ne, nv.layout.ne);
        if nq.dtype != DType::F32
            || !KV_DTYPES.contains(&nk.dtype)
            || !KV_DTYPES.contains(&nv.dtype)
        {
            return Err(Error::DType {
                op: "FLASH_ATTN_EXT",
                dtypes: format!(
                    "q {}, k {}, v {} (q must be f32; k/v f32, f16, bf16, q8_0 or q4_0)",
                    nq.dtype, nk.dtype, nv.dtype
                ),
            });
        }
        if ek[0] != eq[0]
            || ev[1] != ek[1]
            || ek[2] == 0
            || ev[2] == 0
            || eq[2] % ek[2] != 0
            || eq[2] % ev[2] != 0
            || ek[3] != eq[3]
            || ev[3] != eq[3]
        {
            return Err(Error::shape(format!(
                "flash_attn_ext: q {eq:?}, k {ek:?}, v {ev:?} (need k.ne0 == q.ne0, v.ne1 == k.ne1, \
                 n_head a multiple of the kv heads, equal batch)"
            )));
        }
        if let Some(m) = mask {
            let nm = self.try_node(m)?;
            let em = nm.layout.ne;
            if !matches!(nm.dtype, DType::F16 | DType::F32) {
                return Err(Error::DType {
                    op: "FLASH_ATTN_EXT",
                    dtypes: format!("mask must be f16 or f32, got {}", nm.dtype),
                });
            }
            if em[0] != ek[1]
                || em[1] < eq[1]
                || em[2] == 0
                || em[3] == 0
                || eq[2] % em[2] != 0
                || eq[3] % em[3] != 0
            {
                return Err(Error::shape(format!(
                    "flash_attn_ext: mask {em:?} for q {eq:?} and k {ek:?} (need [n_kv, >= n_q, \
                     divisor of n_head, divisor of batch])"
                )));
            }
        } else if max_bias > 0.0 {
            return Err(Error::shape(
                "flash_attn_ext: ALiBi (max_bias > 0) needs a mask",
            ));
        }
        if let Some(s) = sinks {
            let ns = self.try_node(s)?;
            if ns.dtype != DType::F32 || ns.layout.ne != [eq[2], 1, 1, 1] {
                return Err(Error::shape(format!(
                    "flash_attn_ext: sinks must be f32 [{}], got {} {:?}",
                    eq[2], ns.dtype, ns.layout.ne
                )));
            }
        }
        let l = Layout::contiguous(DType::F32, [ev[0], eq[2], eq[1], eq[3]])?;
        self.push(
            Op::FlashAttnExt {
                scale,
                max_bias,
                logit_softcap,
            },
            vec![Some(q), Some(k), Some(v), mask, sinks],
            DType::F32,
            l,
        )
    }

    /// Mixture-of-experts product (ggml_mul_mat_id):
    /// `r[:, e, t] = experts[:, :, ids[e, t]] · b[:, e % b.ne1, t]`.
    ///
    /// `experts` is `[k, m, n_expert]` in any dtype, `b` is `[k, n_expert_used or 1, n_tokens]`
    /// (f32, f16 or bf16), `ids` is I32 `[n_expert_used, n_tokens]`; the result is f32
    /// `[m, n_expert_used, n_tokens]`. An id outside `0..n_expert` is a run-time error.
    pub fn mul_mat_id(
        &mut self,
        experts: TensorId,
        b: TensorId,
        ids: TensorId,
    ) -> Result<TensorId> {
        let (na, nb, ni) = (
            self.try_node(experts)?,
            self.try_node(b)?,
            self.try_node(ids)?,
        );
        let (ea, eb, ei) = (na.layout.ne, nb.layout.ne, ni.layout.ne);
        if ni.dtype != DType::I32 || !matches!(nb.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::DType {
                op: "MUL_MAT_ID",
                dtypes: format!(
                    "experts {}, b {}, ids {} (b must be a float, ids i32)",
                    na.dtype, nb.dtype, ni.dtype
                ),
            });
        }
        if ea[3] != 1
            || eb[3] != 1
            || ei[2] != 1
            || ei[3] != 1
            || ea[0] != eb[0]
            || ei[1] != eb[2]
            || eb[1] == 0
            || ei[0] % eb[1] != 0
        {
            return Err(Error::shape(format!(
                "mul_mat_id: experts {ea:?}, b {eb:?}, ids {ei:?} (need 3-D experts and b, 2-D ids, \
                 experts.ne0 == b.ne0, ids.ne1 == b.ne2, ids.ne0 a multiple of b.ne1)"
            )));
        }
        let l = Layout::contiguous(DType::F32, [ea[1], ei[0], eb[2], 1])?;
        self.push(
            Op::MulMatId,
            vec![Some(experts), Some(b), Some(ids)],
            DType::F32,
            l,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_attn_result_is_permuted_and_checked() {
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, [8, 3, 4, 1]).unwrap();
        let k = g.input("k", DType::F16, [8, 5, 2, 1]).unwrap();
        let v = g.input("v", DType::F16, [6, 5, 2, 1]).unwrap();
        let m = g.input("m", DType::F16, [5, 4, 1, 1]).unwrap();
        let r = g
            .flash_attn_ext(q, k, v, Some(m), None, 0.5, 0.0, 0.0)
            .unwrap();
        assert_eq!(g.ne(r), [6, 4, 3, 1]);
        let k3 = g.input("k3", DType::F16, [8, 5, 3, 1]).unwrap();
        assert!(g
            .flash_attn_ext(q, k3, v, None, None, 1.0, 0.0, 0.0)
            .is_err());
        let short = g.input("short", DType::F16, [5, 2, 1, 1]).unwrap();
        assert!(g
            .flash_attn_ext(q, k, v, Some(short), None, 1.0, 0.0, 0.0)
            .is_err());
        assert!(g
            .flash_attn_ext(q, k, v, None, None, 1.0, 8.0, 0.0)
            .is_err());
    }

    #[test]
    fn mul_mat_id_extents() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [4, 3, 5, 1]).unwrap();
        let b = g.input("b", DType::F32, [4, 1, 7, 1]).unwrap();
        let ids = g.input("ids", DType::I32, [2, 7, 1, 1]).unwrap();
        let r = g.mul_mat_id(a, b, ids).unwrap();
        assert_eq!(g.ne(r), [3, 2, 7, 1]);
        let bad = g.input("bad", DType::I32, [2, 6, 1, 1]).unwrap();
        assert!(g.mul_mat_id(a, b, bad).is_err());
    }
}
