//! Builders for reductions and sorting: sum, sum_rows, cumsum, argmax, argsort, top_k, and the
//! draw from top-k candidates (sample).

use super::{Graph, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::{Op, SampleParams, SortOrder};

impl Graph {
    /// Checks that `a` is a float tensor for `op`, returning its dtype and extents.
    fn float_src(&self, a: TensorId, op: &'static str) -> Result<(DType, [u64; MAX_DIMS])> {
        let n = self.try_node(a)?;
        if !n.dtype.is_float() {
            return Err(Error::DType {
                op,
                dtypes: format!("needs a float tensor, got {}", n.dtype),
            });
        }
        Ok((n.dtype, n.layout.ne))
    }

    /// The sum of all elements, `[1, 1, 1, 1]` in `a`'s dtype (ggml_sum).
    pub fn sum(&mut self, a: TensorId) -> Result<TensorId> {
        let (dtype, _) = self.float_src(a, "SUM")?;
        let l = Layout::contiguous(dtype, [1, 1, 1, 1])?;
        self.push(Op::Sum, vec![Some(a)], dtype, l)
    }

    /// The sum of each row, `[1, ne1, ne2, ne3]` in `a`'s dtype (ggml_sum_rows).
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        let (dtype, ne) = self.float_src(a, "SUM_ROWS")?;
        let l = Layout::contiguous(dtype, [1, ne[1], ne[2], ne[3]])?;
        self.push(Op::SumRows, vec![Some(a)], dtype, l)
    }

    /// Inclusive prefix sums along dim 0, `a`'s extents and dtype (ggml_cumsum).
    pub fn cumsum(&mut self, a: TensorId) -> Result<TensorId> {
        let (dtype, ne) = self.float_src(a, "CUMSUM")?;
        let l = Layout::contiguous(dtype, ne)?;
        self.push(Op::CumSum, vec![Some(a)], dtype, l)
    }

    /// I32 index of the largest value of each row of the matrix `a` (ggml_argmax): result
    /// `[ne1]`. Ties pick the lowest index (the GPU kernels' choice; ggml's CPU loop keeps the
    /// last one, so we document and test the lowest).
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        let (_, ne) = self.float_src(a, "ARGMAX")?;
        if ne[2] != 1 || ne[3] != 1 {
            return Err(Error::shape(format!("argmax needs a matrix, got {ne:?}")));
        }
        if ne[0] == 0 || ne[0] > i32::MAX as u64 {
            return Err(Error::shape(format!(
                "argmax rows of {} values do not fit an i32 index",
                ne[0]
            )));
        }
        let l = Layout::contiguous(DType::I32, [ne[1], 1, 1, 1])?;
        self.push(Op::ArgMax, vec![Some(a)], DType::I32, l)
    }

    /// I32 indices that sort each row of `a` (ggml_argsort), `a`'s extents. The sort is stable:
    /// equal values keep their index order in both directions.
    pub fn argsort(&mut self, a: TensorId, order: SortOrder) -> Result<TensorId> {
        let (_, ne) = self.float_src(a, "ARGSORT")?;
        if ne[0] > i32::MAX as u64 {
            return Err(Error::shape(format!(
                "argsort rows of {} values do not fit an i32 index",
                ne[0]
            )));
        }
        let l = Layout::contiguous(DType::I32, ne)?;
        self.push(Op::ArgSort { order }, vec![Some(a)], DType::I32, l)
    }

    /// I32 indices of the `k` largest values of each row, largest first, ties broken by the lower
    /// index (ggml_top_k): result `[k, ne1, ne2, ne3]`.
    pub fn top_k(&mut self, a: TensorId, k: u32) -> Result<TensorId> {
        let (_, ne) = self.float_src(a, "TOP_K")?;
        if k == 0 || u64::from(k) > ne[0] || ne[0] > i32::MAX as u64 {
            return Err(Error::shape(format!(
                "top_k: k = {k} must be in 1..={} (rows of {ne:?})",
                ne[0]
            )));
        }
        let l = Layout::contiguous(DType::I32, [u64::from(k), ne[1], ne[2], ne[3]])?;
        self.push(Op::TopK { k }, vec![Some(a)], DType::I32, l)
    }

    /// One token id per row drawn from the candidates `vals` (F32 `[k, rows]`, largest first)
    /// with ids `ids` (I32 `[k, rows]`) under per-row `params` (F32 `[SampleParams::WORDS,
    /// rows]`): result I32 `[rows]` ([`Op::Sample`]). Each source may be any view of those
    /// extents.
    pub fn sample(&mut self, vals: TensorId, ids: TensorId, params: TensorId) -> Result<TensorId> {
        let want = |g: &Self, t: TensorId, dtype: DType, ne0: u64, rows: Option<u64>| {
            let n = g.try_node(t)?;
            if n.dtype != dtype {
                return Err(Error::DType {
                    op: "SAMPLE",
                    dtypes: format!("'{}' must be {dtype}, got {}", n.name, n.dtype),
                });
            }
            let ne = n.layout.ne;
            if ne[0] != ne0 || rows.is_some_and(|r| ne[1] != r) || ne[2] != 1 || ne[3] != 1 {
                return Err(Error::shape(format!(
                    "sample: '{}' is {ne:?}, want [{ne0}, {}, 1, 1]",
                    n.name,
                    rows.map_or("rows".into(), |r| r.to_string())
                )));
            }
            Ok(ne[1])
        };
        let k = self.try_node(vals)?.layout.ne[0];
        if k == 0 || k > i32::MAX as u64 {
            return Err(Error::shape(format!("sample: {k} candidates")));
        }
        let rows = want(self, vals, DType::F32, k, None)?;
        want(self, ids, DType::I32, k, Some(rows))?;
        want(self, params, DType::F32, SampleParams::WORDS, Some(rows))?;
        let l = Layout::contiguous(DType::I32, [rows, 1, 1, 1])?;
        self.push(
            Op::Sample,
            vec![Some(vals), Some(ids), Some(params)],
            DType::I32,
            l,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduction_extents_follow_ggml() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [5, 3, 2, 1]).unwrap();
        let s = g.sum(a).unwrap();
        assert_eq!(g.ne(s), [1, 1, 1, 1]);
        let r = g.sum_rows(a).unwrap();
        assert_eq!(g.ne(r), [1, 3, 2, 1]);
        let t = g.top_k(a, 2).unwrap();
        assert_eq!((g.ne(t), g.dtype(t)), ([2, 3, 2, 1], DType::I32));
        assert!(g.top_k(a, 6).is_err());
        assert!(g.top_k(a, 0).is_err());
        assert!(g.argmax(a).is_err(), "argmax needs a matrix");
        let m = g.input("m", DType::F32, [5, 3, 1, 1]).unwrap();
        let am = g.argmax(m).unwrap();
        assert_eq!(g.ne(am), [3, 1, 1, 1]);
        let i = g.input("i", DType::I32, [5, 3, 1, 1]).unwrap();
        assert!(matches!(
            g.argsort(i, SortOrder::Asc),
            Err(Error::DType { .. })
        ));
    }

    #[test]
    fn sample_takes_candidates_ids_and_params_of_equal_rows() {
        let mut g = Graph::new();
        let v = g.input("v", DType::F32, [8, 3, 1, 1]).unwrap();
        let ids = g.input("ids", DType::I32, [8, 3, 1, 1]).unwrap();
        let p = g.input("p", DType::F32, [5, 3, 1, 1]).unwrap();
        let s = g.sample(v, ids, p).unwrap();
        assert_eq!((g.ne(s), g.dtype(s)), ([3, 1, 1, 1], DType::I32));
        let p2 = g.input("p2", DType::F32, [5, 2, 1, 1]).unwrap();
        assert!(g.sample(v, ids, p2).is_err(), "params of other rows");
        let p4 = g.input("p4", DType::F32, [4, 3, 1, 1]).unwrap();
        assert!(g.sample(v, ids, p4).is_err(), "four params a row");
        let fids = g.input("fids", DType::F32, [8, 3, 1, 1]).unwrap();
        assert!(matches!(g.sample(v, fids, p), Err(Error::DType { .. })));
        let short = g.input("short", DType::I32, [7, 3, 1, 1]).unwrap();
        assert!(g.sample(v, short, p).is_err(), "ids of other k");
    }
}
