//! Tensor layouts: 4-D extents with byte strides and a byte offset, as ggml's `ne`/`nb`.
//!
//! `ne[0]` is the innermost (fastest) dimension. For block-quantized dtypes `nb[0]` is the block
//! byte size and `ne[0]` must be a whole number of blocks; `nb[1]` is the row size in bytes.
//! Views, permutes and transposes only change the layout, never the bytes.

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Number of dimensions every layout carries (unused ones have extent 1).
pub const MAX_DIMS: usize = 4;

/// Extents, byte strides and byte offset of a tensor within its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Extents, innermost first.
    pub ne: [u64; MAX_DIMS],
    /// Byte strides, innermost first.
    pub nb: [u64; MAX_DIMS],
    /// Byte offset of element (0,0,0,0) from the start of the storage.
    pub offset: u64,
}

impl Layout {
    /// The contiguous layout of `dtype` with extents `ne`. Fails if `ne[0]` is not a whole number
    /// of blocks or the byte size overflows u64.
    pub fn contiguous(dtype: DType, ne: [u64; MAX_DIMS]) -> Result<Layout> {
        let row = dtype.row_bytes(ne[0]).ok_or_else(|| Error::Shape {
            what: format!(
                "{} row of {} values is not a whole number of {}-value blocks (or overflows)",
                dtype,
                ne[0],
                dtype.block_size()
            ),
        })?;
        let mut nb = [0u64; MAX_DIMS];
        nb[0] = dtype.type_size() as u64;
        nb[1] = row;
        for i in 2..MAX_DIMS {
            nb[i] = nb[i - 1]
                .checked_mul(ne[i - 1])
                .ok_or_else(|| Error::Shape {
                    what: format!("tensor of extents {ne:?} overflows u64 bytes"),
                })?;
        }
        // The total must fit too.
        nb[3].checked_mul(ne[3]).ok_or_else(|| Error::Shape {
            what: format!("tensor of extents {ne:?} overflows u64 bytes"),
        })?;
        Ok(Layout { ne, nb, offset: 0 })
    }

    /// Number of elements.
    pub fn nelements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Number of rows (elements / ne[0]).
    pub fn nrows(&self) -> u64 {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Number of dimensions up to the last one whose extent is not 1 (at least 1).
    pub fn ndims(&self) -> usize {
        (1..MAX_DIMS)
            .rev()
            .find(|&i| self.ne[i] > 1)
            .map_or(1, |i| i + 1)
    }

    /// Bytes spanned from the first to one past the last element (what a buffer must hold beyond
    /// `offset`), as ggml_nbytes. Zero for an empty tensor.
    pub fn span_bytes(&self, dtype: DType) -> u64 {
        if self.ne.contains(&0) {
            return 0;
        }
        let bs = dtype.block_size() as u64;
        if bs == 1 {
            let mut n = dtype.type_size() as u64;
            for i in 0..MAX_DIMS {
                n += (self.ne[i] - 1) * self.nb[i];
            }
            n
        } else {
            let mut n = self.ne[0] / bs * self.nb[0];
            for i in 1..MAX_DIMS {
                n += (self.ne[i] - 1) * self.nb[i];
            }
            n
        }
    }

    /// True when the elements are densely packed in `ne` order with no gaps.
    pub fn is_contiguous(&self, dtype: DType) -> bool {
        match Layout::contiguous(dtype, self.ne) {
            Ok(c) => (0..MAX_DIMS).all(|i| self.ne[i] == 1 || c.nb[i] == self.nb[i]),
            Err(_) => false,
        }
    }

    /// True when each row (dim 0) is dense, whatever the strides of the outer dimensions.
    pub fn rows_contiguous(&self, dtype: DType) -> bool {
        self.ne[0] <= 1 || self.nb[0] == dtype.type_size() as u64
    }

    /// Byte offset of the element at index `i` (for block formats `i[0]` must be a block start).
    pub fn byte_offset(&self, dtype: DType, i: [u64; MAX_DIMS]) -> u64 {
        self.offset
            + i[0] / dtype.block_size() as u64 * self.nb[0]
            + i[1] * self.nb[1]
            + i[2] * self.nb[2]
            + i[3] * self.nb[3]
    }

    /// Same bytes seen with new extents. Requires a contiguous layout and the same element count.
    pub fn reshape(&self, dtype: DType, ne: [u64; MAX_DIMS]) -> Result<Layout> {
        if !self.is_contiguous(dtype) {
            return Err(Error::Shape {
                what: format!(
                    "reshape of a non-contiguous tensor (ne {:?}, nb {:?})",
                    self.ne, self.nb
                ),
            });
        }
        if ne.iter().product::<u64>() != self.nelements() {
            return Err(Error::Shape {
                what: format!(
                    "reshape from {:?} to {:?} changes the element count",
                    self.ne, ne
                ),
            });
        }
        let mut l = Layout::contiguous(dtype, ne)?;
        l.offset = self.offset;
        Ok(l)
    }

    /// Reorders dimensions: source dimension `i` becomes dimension `axes[i]` (ggml_permute).
    pub fn permute(&self, axes: [usize; MAX_DIMS]) -> Result<Layout> {
        let mut seen = [false; MAX_DIMS];
        for &a in &axes {
            if a >= MAX_DIMS || seen[a] {
                return Err(Error::Shape {
                    what: format!("permute axes {axes:?} are not a permutation of 0..4"),
                });
            }
            seen[a] = true;
        }
        let mut out = *self;
        for (i, &a) in axes.iter().enumerate() {
            out.ne[a] = self.ne[i];
            out.nb[a] = self.nb[i];
        }
        Ok(out)
    }

    /// Swaps dimensions 0 and 1.
    pub fn transpose(&self) -> Layout {
        let mut out = *self;
        out.ne.swap(0, 1);
        out.nb.swap(0, 1);
        out
    }

    /// A view with explicit extents, strides and an extra byte offset. Fails when the view reaches
    /// past the bytes `self` spans.
    pub fn view(
        &self,
        dtype: DType,
        ne: [u64; MAX_DIMS],
        nb: [u64; MAX_DIMS],
        offset: u64,
    ) -> Result<Layout> {
        if dtype.is_quantized() && !ne[0].is_multiple_of(dtype.block_size() as u64) {
            return Err(Error::Shape {
                what: format!("view row of {} values is not whole {} blocks", ne[0], dtype),
            });
        }
        let v = Layout {
            ne,
            nb,
            offset: self
                .offset
                .checked_add(offset)
                .ok_or_else(|| Error::Shape {
                    what: "view offset overflows".into(),
                })?,
        };
        let end = v.offset.checked_add(v.span_bytes(dtype));
        let limit = self.offset + self.span_bytes(dtype);
        match end {
            Some(end) if end <= limit || v.nelements() == 0 => Ok(v),
            _ => Err(Error::Shape {
                what: format!("view (ne {ne:?}, nb {nb:?}, offset {offset}) reaches past the {} bytes of its source", self.span_bytes(dtype)),
            }),
        }
    }

    /// Iterates over the starting index of every row, outermost dimension slowest.
    pub fn rows(&self) -> impl Iterator<Item = [u64; MAX_DIMS]> + '_ {
        let (n1, n2, n3) = (self.ne[1], self.ne[2], self.ne[3]);
        (0..n3)
            .flat_map(move |i3| (0..n2).flat_map(move |i2| (0..n1).map(move |i1| [0, i1, i2, i3])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_follow_ggml() {
        let l = Layout::contiguous(DType::F32, [3, 4, 5, 6]).unwrap();
        assert_eq!(l.nb, [4, 12, 48, 240]);
        assert_eq!(l.span_bytes(DType::F32), 3 * 4 * 5 * 6 * 4);
        let q = Layout::contiguous(DType::Q4_0, [64, 2, 1, 1]).unwrap();
        assert_eq!(q.nb, [18, 36, 72, 72]);
        assert_eq!(q.span_bytes(DType::Q4_0), 72);
        assert!(Layout::contiguous(DType::Q4_0, [33, 1, 1, 1]).is_err());
        assert!(Layout::contiguous(DType::F32, [u64::MAX, 2, 1, 1]).is_err());
        assert!(Layout::contiguous(DType::F32, [1 << 40, 1 << 30, 1, 1]).is_err());
    }

    #[test]
    fn transpose_and_permute_are_views() {
        let l = Layout::contiguous(DType::F32, [3, 4, 1, 1]).unwrap();
        let t = l.transpose();
        assert_eq!(t.ne, [4, 3, 1, 1]);
        assert_eq!(t.nb, [12, 4, 48, 48]);
        assert!(!t.is_contiguous(DType::F32));
        assert_eq!(t.span_bytes(DType::F32), l.span_bytes(DType::F32));
        let p = l.permute([1, 0, 2, 3]).unwrap();
        assert_eq!(p, t);
        let p = Layout::contiguous(DType::F32, [2, 3, 4, 5])
            .unwrap()
            .permute([0, 2, 1, 3])
            .unwrap();
        assert_eq!(p.ne, [2, 4, 3, 5]);
        assert!(l.permute([0, 0, 1, 2]).is_err());
    }

    #[test]
    fn reshape_needs_contiguous_and_same_count() {
        let l = Layout::contiguous(DType::F16, [4, 6, 1, 1]).unwrap();
        assert_eq!(
            l.reshape(DType::F16, [8, 3, 1, 1]).unwrap().nb,
            [2, 16, 48, 48]
        );
        assert!(l.reshape(DType::F16, [8, 4, 1, 1]).is_err());
        assert!(l.transpose().reshape(DType::F16, [24, 1, 1, 1]).is_err());
        assert_eq!(l.ndims(), 2);
    }

    #[test]
    fn views_are_bounds_checked() {
        let l = Layout::contiguous(DType::F32, [4, 4, 1, 1]).unwrap();
        let v = l
            .view(DType::F32, [2, 2, 1, 1], [4, 16, 32, 32], 8)
            .unwrap();
        assert_eq!(v.offset, 8);
        assert_eq!(v.byte_offset(DType::F32, [1, 1, 0, 0]), 8 + 4 + 16);
        assert!(l
            .view(DType::F32, [4, 4, 1, 1], [4, 16, 64, 64], 4)
            .is_err());
        assert!(l.rows_contiguous(DType::F32));
        assert_eq!(l.rows().count(), 4);
    }
}
