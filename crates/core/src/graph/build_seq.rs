//! Builders for sequence-model and convolution ops: ssm_conv, ssm_scan, gated_delta_net,
//! conv_2d (direct), im2col, solve_tri.

use super::{Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::Op;

/// Output extent of a convolution (ggml_calc_conv_output_size), or `None` when the dilated
/// kernel does not fit the padded input.
fn conv_out(ins: u64, ks: u64, s: u32, p: u32, d: u32) -> Option<u64> {
    let span = u64::from(d) * ks.checked_sub(1)? + 1;
    let padded = ins + 2 * u64::from(p);
    (s > 0 && d > 0 && padded >= span).then(|| (padded - span) / u64::from(s) + 1)
}

impl Graph {
    /// Checks that every tensor is f32, naming `op` otherwise; returns their extents.
    fn f32_srcs<const N: usize>(
        &self,
        op: &'static str,
        ts: [TensorId; N],
    ) -> Result<[[u64; MAX_DIMS]; N]> {
        let mut out = [[0; MAX_DIMS]; N];
        for (o, t) in out.iter_mut().zip(ts) {
            let n = self.try_node(t)?;
            if n.dtype != DType::F32 {
                return Err(Error::DType {
                    op,
                    dtypes: format!("every source must be f32, '{}' is {}", n.name, n.dtype),
                });
            }
            *o = n.layout.ne;
        }
        Ok(out)
    }

    /// Depthwise causal convolution of Mamba (ggml_ssm_conv): `conv_x` f32 `[d_conv - 1 + n_t,
    /// d_inner, n_s]` (the previous conv state followed by the new tokens), `conv_w` f32
    /// `[d_conv, d_inner]`; result f32 `[d_inner, n_t, n_s]` with
    /// `r[c, t, s] = Σ_j conv_x[t + j, c, s] · conv_w[j, c]`.
    pub fn ssm_conv(&mut self, conv_x: TensorId, conv_w: TensorId) -> Result<TensorId> {
        let [ex, ew] = self.f32_srcs("SSM_CONV", [conv_x, conv_w])?;
        if ex[3] != 1
            || ew[2] != 1
            || ew[3] != 1
            || ew[0] == 0
            || ex[1] != ew[1]
            || ex[0] < ew[0] - 1
        {
            return Err(Error::shape(format!(
                "ssm_conv: conv_x {ex:?}, conv_w {ew:?} (need 3-D conv_x [d_conv - 1 + n_t, d_inner, \
                 n_s] and 2-D conv_w [d_conv, d_inner])"
            )));
        }
        let l = Layout::contiguous(DType::F32, [ew[1], ex[0] + 1 - ew[0], ex[2], 1])?;
        self.push(Op::SsmConv, vec![Some(conv_x), Some(conv_w)], DType::F32, l)
    }

    /// Selective state-space scan (ggml_ssm_scan), Mamba-1 and Mamba-2, all f32 but `ids`:
    ///
    /// - `s`: states `[d_state, head_dim, n_head, n_rs]`; sequence `i` starts from state
    ///   `ids[i]` (I32 `[n_seqs]`, checked at run time).
    /// - `x`: `[head_dim, n_head, n_seq_tokens, n_seqs]`; `dt`: `[n_head, n_seq_tokens, n_seqs]`.
    /// - `a`: `[d_state, n_head]` (Mamba-1, per-state decay) or `[1, n_head]` (Mamba-2).
    /// - `b`, `c`: `[d_state, n_group, n_seq_tokens, n_seqs]`, head `h` uses group
    ///   `h / (n_head / n_group)`.
    ///
    /// Per token: `dt' = softplus(dt)`, `state = state·exp(dt'·A) + B·x·dt'`, `y = Σ state·C`.
    /// The result is one f32 row: all of `y` (`x`'s extents, flattened) followed by the final
    /// states `[d_state, head_dim, n_head, n_seqs]`.
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan(
        &mut self,
        s: TensorId,
        x: TensorId,
        dt: TensorId,
        a: TensorId,
        b: TensorId,
        c: TensorId,
        ids: TensorId,
    ) -> Result<TensorId> {
        let [es, ex, edt, ea, eb, ec] = self.f32_srcs("SSM_SCAN", [s, x, dt, a, b, c])?;
        let ni = self.try_node(ids)?;
        if ni.dtype != DType::I32 {
            return Err(Error::DType {
                op: "SSM_SCAN",
                dtypes: format!("ids must be i32, got {}", ni.dtype),
            });
        }
        let ei = ni.layout.ne;
        let [d_state, head_dim, n_head, n_tokens] = [es[0], ex[0], ex[1], ex[2]];
        let n_seqs = ex[3];
        let ok = edt == [n_head, n_tokens, n_seqs, 1]
            && es[1] == head_dim
            && es[2] == n_head
            && eb == ec
            && eb[0] == d_state
            && eb[1] > 0
            && n_head % eb[1] == 0
            && eb[2] == n_tokens
            && eb[3] == n_seqs
            && ei == [n_seqs, 1, 1, 1]
            && (ea[0] == 1 || ea[0] == d_state)
            && ea[1] == n_head
            && ea[2] == 1
            && ea[3] == 1;
        if !ok {
            return Err(Error::shape(format!(
                "ssm_scan: s {es:?}, x {ex:?}, dt {edt:?}, A {ea:?}, B {eb:?}, C {ec:?}, ids {ei:?} \
                 (see Graph::ssm_scan for the expected extents)"
            )));
        }
        let n = ex.iter().product::<u64>() + d_state * head_dim * n_head * n_seqs;
        let l = Layout::contiguous(DType::F32, [n, 1, 1, 1])?;
        self.push(
            Op::SsmScan,
            vec![
                Some(s),
                Some(x),
                Some(dt),
                Some(a),
                Some(b),
                Some(c),
                Some(ids),
            ],
            DType::F32,
            l,
        )
    }

    /// Gated delta rule of Qwen3-Next / Kimi linear attention (ggml_gated_delta_net), all f32:
    ///
    /// - `q`, `k`: `[S, H_k, n_tokens, n_seqs_k]`, `v`: `[S, H, n_tokens, n_seqs]`; value head
    ///   `h` reads query/key head `h % H_k` (tiled, as ggml) and sequence `i` reads
    ///   `i / (n_seqs / n_seqs_k)`.
    /// - `g`: `[1, H, n_tokens, n_seqs]` (one log-decay per head) or `[S, H, n_tokens, n_seqs]`
    ///   (per key row, "KDA"); `beta`: `[1, H, n_tokens, n_seqs]`.
    /// - `state`: `S·S·H·n_seqs` values, per (head, sequence) a matrix stored transposed:
    ///   element `j·S + i` is `M[i][j]` (key index `i`, value index `j`).
    ///
    /// Per token: `M[i][:] *= exp(g[i])` (or `exp(g)`), `delta = (v - Mᵀk)·beta`,
    /// `M += k ⊗ delta`, `o = Mᵀq / sqrt(S)`. The result is f32 `[S·H, n_tokens·n_seqs + S·n_seqs]`:
    /// first the outputs `o` as `[S, H, n_tokens, n_seqs]`, then the final states in `state`'s
    /// layout.
    pub fn gated_delta_net(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        g: TensorId,
        beta: TensorId,
        state: TensorId,
    ) -> Result<TensorId> {
        let [eq, ek, ev, eg, eb, es] =
            self.f32_srcs("GATED_DELTA_NET", [q, k, v, g, beta, state])?;
        let [s, h, n_tokens, n_seqs] = ev;
        let heads_tile = |e: [u64; MAX_DIMS]| {
            e[0] == s
                && e[1] > 0
                && h % e[1] == 0
                && e[2] == n_tokens
                && e[3] > 0
                && n_seqs % e[3] == 0
        };
        let ok = heads_tile(eq)
            && heads_tile(ek)
            && (eg[0] == 1 || eg[0] == s)
            && eg[1..] == ev[1..]
            && eb == [1, h, n_tokens, n_seqs]
            && es.iter().product::<u64>() == s * s * h * n_seqs;
        if !ok {
            return Err(Error::shape(format!(
                "gated_delta_net: q {eq:?}, k {ek:?}, v {ev:?}, g {eg:?}, beta {eb:?}, state {es:?} \
                 (see Graph::gated_delta_net for the expected extents)"
            )));
        }
        let l = Layout::contiguous(DType::F32, [s * h, n_tokens * n_seqs + s * n_seqs, 1, 1])?;
        self.push(
            Op::GatedDeltaNet,
            vec![Some(q), Some(k), Some(v), Some(g), Some(beta), Some(state)],
            DType::F32,
            l,
        )
    }

    /// Direct 2-D convolution (ggml_conv_2d_direct): `kernel` `[KW, KH, C_in, C_out]` (f32 or
    /// f16), `input` `[W, H, C_in, N]` (f32 or f16); result `[OW, OH, C_out, N]` in `input`'s
    /// dtype with `O = (I + 2p - d(K - 1) - 1) / s + 1` per axis (`[0]` is x/W, `[1]` is y/H).
    pub fn conv_2d(
        &mut self,
        kernel: TensorId,
        input: TensorId,
        stride: [u32; 2],
        pad: [u32; 2],
        dilation: [u32; 2],
    ) -> Result<TensorId> {
        let (nk, ni) = (self.try_node(kernel)?, self.try_node(input)?);
        let (ek, ei) = (nk.layout.ne, ni.layout.ne);
        let float = |d: DType| matches!(d, DType::F32 | DType::F16);
        if !float(nk.dtype) || !float(ni.dtype) {
            return Err(Error::DType {
                op: "CONV_2D",
                dtypes: format!("kernel {}, input {} (f32 or f16)", nk.dtype, ni.dtype),
            });
        }
        let ow = conv_out(ei[0], ek[0], stride[0], pad[0], dilation[0]);
        let oh = conv_out(ei[1], ek[1], stride[1], pad[1], dilation[1]);
        let (Some(ow), Some(oh), true) = (ow, oh, ek[2] == ei[2]) else {
            return Err(Error::shape(format!(
                "conv_2d: kernel {ek:?}, input {ei:?}, stride {stride:?}, pad {pad:?}, dilation \
                 {dilation:?} (need equal channels, a kernel that fits, nonzero stride/dilation)"
            )));
        };
        let dtype = ni.dtype;
        let l = Layout::contiguous(dtype, [ow, oh, ek[3], ei[3]])?;
        self.push(
            Op::Conv2d {
                stride,
                pad,
                dilation,
            },
            vec![Some(kernel), Some(input)],
            dtype,
            l,
        )
    }

    /// Unfolds convolution patches (ggml_im2col). 2-D: `kernel` `[KW, KH, C, *]`, `input`
    /// `[W, H, C, N]`, result `[C·KH·KW, OW, OH, N]`. 1-D: `kernel` `[KW, C, *]`, `input`
    /// `[W, C, N]`, result `[C·KW, OW, N, 1]`. Element `(c·KH + ky)·KW + kx` of patch `(ox, oy)` is
    /// `input[ox·s0 + kx·d0 - p0, oy·s1 + ky·d1 - p1, c]`, zero outside. `dst_dtype` is f32 or
    /// f16; the kernel only gives its extents.
    #[allow(clippy::too_many_arguments)]
    pub fn im2col(
        &mut self,
        kernel: TensorId,
        input: TensorId,
        stride: [u32; 2],
        pad: [u32; 2],
        dilation: [u32; 2],
        is_2d: bool,
        dst_dtype: DType,
    ) -> Result<TensorId> {
        let (nk, ni) = (self.try_node(kernel)?, self.try_node(input)?);
        let (ek, ei) = (nk.layout.ne, ni.layout.ne);
        if !matches!(dst_dtype, DType::F32 | DType::F16)
            || !matches!(ni.dtype, DType::F32 | DType::F16)
        {
            return Err(Error::DType {
                op: "IM2COL",
                dtypes: format!("input {}, dst {} (f32 or f16)", ni.dtype, dst_dtype),
            });
        }
        let ow = conv_out(ei[0], ek[0], stride[0], pad[0], dilation[0]);
        let ne = if is_2d {
            let oh = conv_out(ei[1], ek[1], stride[1], pad[1], dilation[1]);
            match (ow, oh, ek[2] == ei[2]) {
                (Some(ow), Some(oh), true) => Some([ek[2] * ek[1] * ek[0], ow, oh, ei[3]]),
                _ => None,
            }
        } else {
            match (ow, ek[1] == ei[1] && ei[3] == 1) {
                (Some(ow), true) => Some([ek[1] * ek[0], ow, ei[2], 1]),
                _ => None,
            }
        };
        let Some(ne) = ne else {
            return Err(Error::shape(format!(
                "im2col (2-D: {is_2d}): kernel {ek:?}, input {ei:?}, stride {stride:?}, pad \
                 {pad:?}, dilation {dilation:?} (need equal channels, a kernel that fits, nonzero \
                 stride/dilation)"
            )));
        };
        let l = Layout::contiguous(dst_dtype, ne)?;
        self.push(
            Op::Im2Col {
                stride,
                pad,
                dilation,
                is_2d,
            },
            vec![Some(kernel), Some(input)],
            dst_dtype,
            l,
        )
    }

    /// Solves a triangular system (ggml_solve_tri), f32. `a` is `[n, n, b2, b3]` with `a[c, r]`
    /// the matrix element of row `r`, column `c`; `b` and the result are `[k, n, b2, b3]` (`n`
    /// rows of `k` columns) for `left` (`A·X = B`) or `[n, k, b2, b3]` for right (`X·A = B`).
    /// `lower` picks the triangle read, `uni` takes the diagonal as ones. ggml's kernels only
    /// implement left, lower, non-unit; the reference solves all eight forms. A zero pivot is a
    /// run-time error.
    pub fn solve_tri(
        &mut self,
        a: TensorId,
        b: TensorId,
        left: bool,
        lower: bool,
        uni: bool,
    ) -> Result<TensorId> {
        let [ea, eb] = self.f32_srcs("SOLVE_TRI", [a, b])?;
        let n_matches = if left { eb[1] == ea[0] } else { eb[0] == ea[0] };
        if ea[0] != ea[1] || !n_matches || ea[2] != eb[2] || ea[3] != eb[3] {
            return Err(Error::shape(format!(
                "solve_tri (left: {left}): a {ea:?}, b {eb:?} (need square a and b sharing its \
                 size on the solved side and its batch dims)"
            )));
        }
        let l = Layout::contiguous(DType::F32, eb)?;
        self.push(
            Op::SolveTri { left, lower, uni },
            vec![Some(a), Some(b)],
            DType::F32,
            l,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_output_size_matches_ggml() {
        assert_eq!(conv_out(3, 2, 1, 0, 1), Some(2));
        assert_eq!(conv_out(7, 3, 2, 1, 2), Some(3)); // (7 + 2 - 4 - 1) / 2 + 1
        assert_eq!(conv_out(2, 3, 1, 0, 1), None);
        assert_eq!(conv_out(2, 3, 0, 1, 1), None);
    }

    #[test]
    fn sequence_builders_check_extents() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [6, 4, 2, 1]).unwrap();
        let w = g.input("w", DType::F32, [3, 4, 1, 1]).unwrap();
        let r = g.ssm_conv(x, w).unwrap();
        assert_eq!(g.ne(r), [4, 4, 2, 1]);
        let w5 = g.input("w5", DType::F32, [3, 5, 1, 1]).unwrap();
        assert!(g.ssm_conv(x, w5).is_err());

        let k = g.input("k", DType::F32, [2, 2, 3, 4]).unwrap();
        let img = g.input("img", DType::F32, [5, 5, 3, 1]).unwrap();
        let c = g.conv_2d(k, img, [1, 1], [0, 0], [1, 1]).unwrap();
        assert_eq!(g.ne(c), [4, 4, 4, 1]);
        let i = g
            .im2col(k, img, [2, 2], [1, 1], [1, 1], true, DType::F16)
            .unwrap();
        assert_eq!((g.ne(i), g.dtype(i)), ([12, 3, 3, 1], DType::F16));
        let k1 = g.input("k1", DType::F32, [2, 3, 1, 1]).unwrap();
        let s1 = g.input("s1", DType::F32, [5, 3, 2, 1]).unwrap();
        let i1 = g
            .im2col(k1, s1, [1, 0], [0, 0], [1, 0], false, DType::F32)
            .unwrap();
        assert_eq!(g.ne(i1), [6, 4, 2, 1]);

        let a = g.input("a", DType::F32, [3, 3, 1, 1]).unwrap();
        let b = g.input("b", DType::F32, [2, 3, 1, 1]).unwrap();
        assert!(g.solve_tri(a, b, true, true, false).is_ok());
        assert!(g.solve_tri(a, b, false, true, false).is_err());
    }
}
