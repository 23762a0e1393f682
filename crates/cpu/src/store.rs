//! Storage of a compiled graph on the CPU and element access through layouts.
//!
//! Computed tensors live in one arena laid out by the core memory planner; inputs and states
//! have their own buffers; weights are borrowed from the graph. Reading gathers any layout
//! (views, permutes, quantized rows) into dense f32 in `ne` order; writing scatters dense values
//! back through the destination's layout, converting to its dtype.

use std::collections::HashMap;

use wgllm_core::layout::MAX_DIMS;
use wgllm_core::plan::MemoryPlan;
use wgllm_core::quant;
use wgllm_core::{DType, Error, Graph, Layout, Op, Result, TensorId};

/// Dense f32 values in `ne` order (dim 0 fastest).
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    pub ne: [usize; MAX_DIMS],
    pub data: Vec<f32>,
}

impl Dense {
    /// Index of element `(i0, i1, i2, i3)`.
    #[inline]
    pub fn idx(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
        ((i3 * self.ne[2] + i2) * self.ne[1] + i1) * self.ne[0] + i0
    }

    /// Element `(i0, i1, i2, i3)`.
    #[inline]
    pub fn at(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> f32 {
        self.data[self.idx(i0, i1, i2, i3)]
    }

    /// Row `(i1, i2, i3)` as a slice.
    pub fn row(&self, i1: usize, i2: usize, i3: usize) -> &[f32] {
        let s = self.idx(0, i1, i2, i3);
        &self.data[s..s + self.ne[0]]
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }
}

/// Extents as usize.
pub fn ne_usize(l: &Layout) -> [usize; MAX_DIMS] {
    l.ne.map(|x| x as usize)
}

/// Read access to one tensor's rows, shareable across threads.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub bytes: &'a [u8],
    pub dtype: DType,
    pub layout: Layout,
}

impl Rows<'_> {
    /// Extents as usize.
    pub fn ne(&self) -> [usize; MAX_DIMS] {
        ne_usize(&self.layout)
    }

    /// Decodes row `(i1, i2, i3)` into `out` (length ne[0]).
    pub fn row_f32(&self, i1: usize, i2: usize, i3: usize, out: &mut [f32]) -> Result<()> {
        let l = &self.layout;
        let start = l.byte_offset(self.dtype, [0, i1 as u64, i2 as u64, i3 as u64]) as usize;
        if self.dtype.is_quantized() {
            if !l.rows_contiguous(self.dtype) {
                return Err(Error::shape(format!(
                    "{} rows must be contiguous",
                    self.dtype
                )));
            }
            let n = self
                .dtype
                .row_bytes(l.ne[0])
                .ok_or_else(|| Error::shape("row size"))? as usize;
            let src = self
                .bytes
                .get(start..start + n)
                .ok_or_else(|| Error::shape("row past the end of its storage"))?;
            return quant::dequantize(self.dtype, src, out);
        }
        let nb0 = l.nb[0] as usize;
        let ts = self.dtype.type_size();
        for (i0, o) in out.iter_mut().enumerate() {
            let off = start + i0 * nb0;
            let b = self
                .bytes
                .get(off..off + ts)
                .ok_or_else(|| Error::shape("element past the end of its storage"))?;
            *o = scalar_to_f32(self.dtype, b);
        }
        Ok(())
    }

    /// Reads integer row `(i1, i2, i3)` (I8..I64) as i64 values.
    pub fn row_i64(&self, i1: usize, i2: usize, i3: usize) -> Result<Vec<i64>> {
        let l = &self.layout;
        if !self.dtype.is_int() {
            return Err(Error::DType {
                op: "index read",
                dtypes: format!("expected an integer tensor, got {}", self.dtype),
            });
        }
        let start = l.byte_offset(self.dtype, [0, i1 as u64, i2 as u64, i3 as u64]) as usize;
        let ts = self.dtype.type_size();
        (0..l.ne[0] as usize)
            .map(|i0| {
                let off = start + i0 * l.nb[0] as usize;
                let b = self
                    .bytes
                    .get(off..off + ts)
                    .ok_or_else(|| Error::shape("index past the end of its storage"))?;
                Ok(match self.dtype {
                    DType::I8 => b[0] as i8 as i64,
                    DType::I16 => i16::from_le_bytes([b[0], b[1]]) as i64,
                    DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
                    _ => i64::from_le_bytes(b.try_into().expect("8 bytes")),
                })
            })
            .collect()
    }

    /// The whole tensor as dense f32 in `ne` order.
    pub fn dense(&self) -> Result<Dense> {
        let ne = self.ne();
        let mut data = vec![0f32; ne.iter().product()];
        if ne[0] > 0 {
            let mut chunks = data.chunks_exact_mut(ne[0]);
            for i3 in 0..ne[3] {
                for i2 in 0..ne[2] {
                    for i1 in 0..ne[1] {
                        let out = chunks.next().expect("one chunk per row");
                        if self.dtype.is_int() {
                            for (o, v) in out.iter_mut().zip(self.row_i64(i1, i2, i3)?) {
                                *o = v as f32;
                            }
                        } else {
                            self.row_f32(i1, i2, i3, out)?;
                        }
                    }
                }
            }
        }
        Ok(Dense { ne, data })
    }

    /// The whole integer tensor as i64 in `ne` order.
    pub fn dense_i64(&self) -> Result<Vec<i64>> {
        let ne = self.ne();
        let mut out = Vec::with_capacity(ne.iter().product());
        for i3 in 0..ne[3] {
            for i2 in 0..ne[2] {
                for i1 in 0..ne[1] {
                    out.extend(self.row_i64(i1, i2, i3)?);
                }
            }
        }
        Ok(out)
    }
}

/// Decodes one scalar of a non-block dtype.
pub fn scalar_to_f32(dtype: DType, b: &[u8]) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
        DType::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        DType::F64 => f64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as f32,
        DType::I8 => b[0] as i8 as f32,
        DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f32,
        DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        DType::I64 => i64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as f32,
        _ => f32::NAN,
    }
}

/// Encodes one value into a non-block dtype (integers round to nearest, saturating).
pub fn f32_to_scalar(dtype: DType, v: f32, out: &mut [u8]) {
    match dtype {
        DType::F32 => out[..4].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => out[..2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
        DType::BF16 => out[..2].copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
        DType::F64 => out[..8].copy_from_slice(&(v as f64).to_le_bytes()),
        DType::I8 => out[0] = (v.round() as i8) as u8,
        DType::I16 => out[..2].copy_from_slice(&(v.round() as i16).to_le_bytes()),
        DType::I32 => out[..4].copy_from_slice(&(v.round() as i32).to_le_bytes()),
        DType::I64 => out[..8].copy_from_slice(&(v.round() as i64).to_le_bytes()),
        _ => {}
    }
}

/// All bytes of a compiled graph.
pub struct Store {
    pub arena: Vec<u8>,
    pub leaves: HashMap<TensorId, Vec<u8>>,
    pub plan: MemoryPlan,
}

impl Store {
    /// Allocates the arena and zeroed buffers for inputs and states; every weight must have its
    /// bytes on the host (not resident on a device).
    pub fn new(graph: &Graph, plan: MemoryPlan) -> Result<Store> {
        let arena_len = usize::try_from(plan.arena_bytes).map_err(|_| Error::Device {
            what: "arena larger than the address space".into(),
        })?;
        let mut leaves = HashMap::new();
        for t in graph.ids() {
            let n = graph.node(t);
            if matches!(n.op, Op::Input | Op::State) {
                leaves.insert(t, vec![0u8; n.span_bytes() as usize]);
            }
            if n.op == Op::Weight {
                graph.weight_bytes(t)?;
            }
        }
        Ok(Store {
            arena: vec![0u8; arena_len],
            leaves,
            plan,
        })
    }

    /// The bytes of the storage `t` lives in (its root's storage; `t`'s layout offset is relative
    /// to the start of the returned slice).
    pub fn storage<'a>(&'a self, graph: &'a Graph, t: TensorId) -> Result<&'a [u8]> {
        let root = graph.root(t);
        if let Some(w) = graph.weight_data(root) {
            return Ok(w);
        }
        if let Some(b) = self.leaves.get(&root) {
            return Ok(b);
        }
        let off = self.plan.offsets[root.index()]
            .ok_or_else(|| Error::graph(format!("tensor {} has no storage", root.0)))?
            as usize;
        let len = graph.node(root).span_bytes() as usize;
        Ok(&self.arena[off..off + len])
    }

    /// Mutable bytes of the storage `t` lives in; weights are read-only.
    pub fn storage_mut(&mut self, graph: &Graph, t: TensorId) -> Result<&mut [u8]> {
        let root = graph.root(t);
        if graph.weight_data(root).is_some() {
            return Err(Error::graph(format!(
                "cannot write into weight '{}'",
                graph.node(root).name
            )));
        }
        if let Some(b) = self.leaves.get_mut(&root) {
            return Ok(b);
        }
        let off = self.plan.offsets[root.index()]
            .ok_or_else(|| Error::graph(format!("tensor {} has no storage", root.0)))?
            as usize;
        let len = graph.node(root).span_bytes() as usize;
        Ok(&mut self.arena[off..off + len])
    }

    /// Row access to tensor `t`.
    pub fn rows<'a>(&'a self, graph: &'a Graph, t: TensorId) -> Result<Rows<'a>> {
        let n = graph.node(t);
        Ok(Rows {
            bytes: self.storage(graph, t)?,
            dtype: n.dtype,
            layout: n.layout,
        })
    }

    /// Writes dense values (in `t`'s `ne` order) through `t`'s layout, converting to its dtype.
    /// `only_rows`, when given, limits the write to those rows (flat row indices).
    pub fn write_dense(
        &mut self,
        graph: &Graph,
        t: TensorId,
        data: &[f32],
        only_rows: Option<&[usize]>,
    ) -> Result<()> {
        let n = graph.node(t);
        let (dtype, layout) = (n.dtype, n.layout);
        let ne = ne_usize(&layout);
        if data.len() != ne.iter().product::<usize>() {
            return Err(Error::shape(format!(
                "{}: {} values for a tensor of {:?}",
                n.name,
                data.len(),
                ne
            )));
        }
        if dtype.is_quantized() && !layout.rows_contiguous(dtype) {
            return Err(Error::shape(format!(
                "{dtype} destination rows must be contiguous"
            )));
        }
        let bytes = self.storage_mut(graph, t)?;
        let row_bytes = dtype.row_bytes(layout.ne[0]).unwrap_or(0) as usize;
        let mut write_row = |r: usize| -> Result<()> {
            let (i1, i2, i3) = (r % ne[1], (r / ne[1]) % ne[2], r / (ne[1] * ne[2]));
            let start = layout.byte_offset(dtype, [0, i1 as u64, i2 as u64, i3 as u64]) as usize;
            let vals = &data[r * ne[0]..(r + 1) * ne[0]];
            if dtype.is_quantized() {
                let dst = bytes
                    .get_mut(start..start + row_bytes)
                    .ok_or_else(|| Error::shape("row past the end of its storage"))?;
                return quant::quantize(dtype, vals, dst);
            }
            let ts = dtype.type_size();
            for (i0, &v) in vals.iter().enumerate() {
                let off = start + i0 * layout.nb[0] as usize;
                let dst = bytes
                    .get_mut(off..off + ts)
                    .ok_or_else(|| Error::shape("element past the end of its storage"))?;
                f32_to_scalar(dtype, v, dst);
            }
            Ok(())
        };
        if ne[0] == 0 {
            return Ok(());
        }
        match only_rows {
            Some(rows) => rows.iter().try_for_each(|&r| write_row(r)),
            None => (0..ne[1] * ne[2] * ne[3]).try_for_each(write_row),
        }
    }

    /// Writes integer values (in `t`'s `ne` order) through `t`'s layout.
    pub fn write_i32(&mut self, graph: &Graph, t: TensorId, data: &[i32]) -> Result<()> {
        let n = graph.node(t);
        if n.dtype != DType::I32 {
            return Err(Error::DType {
                op: n.op.name(),
                dtypes: format!("expected an i32 result, node is {}", n.dtype),
            });
        }
        let layout = n.layout;
        let ne = ne_usize(&layout);
        if data.len() != ne.iter().product::<usize>() {
            return Err(Error::shape(format!(
                "{} values for a tensor of {:?}",
                data.len(),
                ne
            )));
        }
        let bytes = self.storage_mut(graph, t)?;
        let mut k = 0;
        for i3 in 0..ne[3] {
            for i2 in 0..ne[2] {
                for i1 in 0..ne[1] {
                    for i0 in 0..ne[0] {
                        let off = layout
                            .byte_offset(DType::I32, [i0 as u64, i1 as u64, i2 as u64, i3 as u64])
                            as usize;
                        bytes[off..off + 4].copy_from_slice(&data[k].to_le_bytes());
                        k += 1;
                    }
                }
            }
        }
        Ok(())
    }
}
