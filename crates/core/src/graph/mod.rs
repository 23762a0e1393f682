//! The graph IR: nodes in execution order, each an [`Op`] over earlier nodes, with its result's
//! dtype and layout computed (and validated) by the builder methods.
//!
//! Builder methods live next to their op family (`build_*.rs`); each checks its sources' dtypes
//! and extents and returns an [`Error`] naming the problem rather than panicking.

mod build_attn;
mod build_layout;
mod build_math;
mod build_nn;
mod build_reduce;
mod build_seq;
mod build_shape;

pub use build_math::can_repeat;

use std::collections::HashMap;

use bytes::Bytes;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::Op;

/// Index of a node (and of the tensor it produces) in its [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    /// The index into `Graph::nodes`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One op application and the tensor it produces.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    /// Sources in the op's documented order; `None` for absent optional sources.
    pub srcs: Vec<Option<TensorId>>,
    pub dtype: DType,
    pub layout: Layout,
    pub name: String,
}

impl Node {
    /// Source `i`, or an error naming the op when it is absent.
    pub fn src(&self, i: usize) -> Result<TensorId> {
        self.srcs.get(i).copied().flatten().ok_or_else(|| {
            Error::graph(format!(
                "{} node '{}' has no source {i}",
                self.op.name(),
                self.name
            ))
        })
    }

    /// Source `i` if present.
    pub fn opt_src(&self, i: usize) -> Option<TensorId> {
        self.srcs.get(i).copied().flatten()
    }

    /// Bytes spanned by the result.
    pub fn span_bytes(&self) -> u64 {
        self.layout.span_bytes(self.dtype)
    }
}

/// Where the data of a `Weight` leaf is.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightData {
    /// Its contiguous bytes, given when the graph is built (usually a slice of a mapped file).
    Bytes(Bytes),
    /// Already on the device, under this name: uploaded before the graph was built (a model
    /// streamed to the GPU, whose bytes were never all in host memory). Only a backend that
    /// keeps such weights can compile the graph (WebGPU's resident weights); it refuses the
    /// graph when no complete weight of this name, dtype and extents is there.
    Resident(String),
}

/// A computation: nodes in execution order, weight data, and the tensors a run must keep.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    weights: HashMap<TensorId, WeightData>,
    outputs: Vec<TensorId>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// All nodes in execution order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node producing `t`.
    pub fn node(&self, t: TensorId) -> &Node {
        &self.nodes[t.index()]
    }

    /// The node producing `t`, or an error when `t` is not from this graph.
    pub fn try_node(&self, t: TensorId) -> Result<&Node> {
        self.nodes.get(t.index()).ok_or_else(|| {
            Error::graph(format!(
                "tensor {} is not in this graph of {} nodes",
                t.0,
                self.nodes.len()
            ))
        })
    }

    /// Ids of all nodes in order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> {
        (0..self.nodes.len() as u32).map(TensorId)
    }

    /// Weight bytes of a `Weight` leaf (`None` also for a [`WeightData::Resident`] one).
    pub fn weight_data(&self, t: TensorId) -> Option<&Bytes> {
        match self.weights.get(&t)? {
            WeightData::Bytes(b) => Some(b),
            WeightData::Resident(_) => None,
        }
    }

    /// Where the data of `Weight` leaf `t` is.
    pub fn weight_source(&self, t: TensorId) -> Option<&WeightData> {
        self.weights.get(&t)
    }

    /// The bytes of `Weight` leaf `t`, or an error saying why a backend that needs them on the
    /// host cannot have them.
    pub fn weight_bytes(&self, t: TensorId) -> Result<&Bytes> {
        let name = &self.try_node(t)?.name;
        match self.weights.get(&t) {
            Some(WeightData::Bytes(b)) => Ok(b),
            Some(WeightData::Resident(key)) => Err(Error::graph(format!(
                "weight '{name}' is resident on a device (as '{key}'), its bytes are not on the host"
            ))),
            None => Err(Error::graph(format!("'{name}' is not a weight"))),
        }
    }

    /// Tensors whose values a run must keep readable.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Marks `t` as an output: its storage is never reused and backends can read it after a run.
    pub fn mark_output(&mut self, t: TensorId) -> Result<()> {
        self.try_node(t)?;
        if !self.outputs.contains(&t) {
            self.outputs.push(t);
        }
        Ok(())
    }

    /// The tensor whose storage `t` lives in (follows views and in-place writes to their leaf or
    /// computing node).
    pub fn root(&self, mut t: TensorId) -> TensorId {
        loop {
            let n = self.node(t);
            match (n.op.aliases_src0(), n.opt_src(0)) {
                (true, Some(s)) => t = s,
                _ => return t,
            }
        }
    }

    /// Gives node `t` a name (for errors, profiles and debugging).
    pub fn set_name(&mut self, t: TensorId, name: impl Into<String>) {
        self.nodes[t.index()].name = name.into();
    }

    /// Appends a node after checking that its sources exist. Builder methods call this once they
    /// have computed the result's dtype and layout.
    pub fn push(
        &mut self,
        op: Op,
        srcs: Vec<Option<TensorId>>,
        dtype: DType,
        layout: Layout,
    ) -> Result<TensorId> {
        for s in srcs.iter().flatten() {
            self.try_node(*s)?;
        }
        let id = TensorId(
            u32::try_from(self.nodes.len()).map_err(|_| Error::graph("more than 2^32 nodes"))?,
        );
        let name = format!("{}#{}", op.name().to_ascii_lowercase(), id.0);
        self.nodes.push(Node {
            op,
            srcs,
            dtype,
            layout,
            name,
        });
        Ok(id)
    }

    /// dtype of `t`.
    pub fn dtype(&self, t: TensorId) -> DType {
        self.node(t).dtype
    }

    /// Extents of `t`.
    pub fn ne(&self, t: TensorId) -> [u64; MAX_DIMS] {
        self.node(t).layout.ne
    }

    // ---- leaves ----

    /// A tensor whose contiguous bytes are supplied to every run.
    pub fn input(&mut self, name: &str, dtype: DType, ne: [u64; MAX_DIMS]) -> Result<TensorId> {
        let l = Layout::contiguous(dtype, ne)?;
        let t = self.push(Op::Input, vec![], dtype, l)?;
        self.set_name(t, name);
        Ok(t)
    }

    /// A constant tensor (model weight) with its contiguous bytes.
    pub fn weight(
        &mut self,
        name: &str,
        dtype: DType,
        ne: [u64; MAX_DIMS],
        data: Bytes,
    ) -> Result<TensorId> {
        let l = Layout::contiguous(dtype, ne)?;
        let want = l.span_bytes(dtype);
        if data.len() as u64 != want {
            return Err(Error::shape(format!(
                "weight '{name}' ({dtype} {ne:?}) needs {want} bytes, got {}",
                data.len()
            )));
        }
        let t = self.push(Op::Weight, vec![], dtype, l)?;
        self.set_name(t, name);
        self.weights.insert(t, WeightData::Bytes(data));
        Ok(t)
    }

    /// A model weight already resident on the device under `name` ([`WeightData::Resident`]):
    /// the backend finds it when compiling, and refuses the graph when it is not there.
    pub fn resident_weight(
        &mut self,
        name: &str,
        dtype: DType,
        ne: [u64; MAX_DIMS],
    ) -> Result<TensorId> {
        let l = Layout::contiguous(dtype, ne)?;
        let t = self.push(Op::Weight, vec![], dtype, l)?;
        self.set_name(t, name);
        self.weights
            .insert(t, WeightData::Resident(name.to_owned()));
        Ok(t)
    }

    /// Persistent storage, zero-initialized at compile time and kept across runs (KV cache).
    pub fn state(&mut self, name: &str, dtype: DType, ne: [u64; MAX_DIMS]) -> Result<TensorId> {
        let l = Layout::contiguous(dtype, ne)?;
        let t = self.push(Op::State, vec![], dtype, l)?;
        self.set_name(t, name);
        Ok(t)
    }

    /// Removes nodes that no output and no in-place write into a `State` depends on, returning the
    /// pruned graph and, for each old id, its new id.
    pub fn eliminate_dead(&self) -> (Graph, Vec<Option<TensorId>>) {
        let n = self.nodes.len();
        let mut live = vec![false; n];
        let mut stack: Vec<TensorId> = self.outputs.clone();
        for t in self.ids() {
            let node = self.node(t);
            let writes_state =
                matches!(node.op, Op::Cpy | Op::SetRows) && self.node(self.root(t)).op == Op::State;
            if writes_state || node.op == Op::State {
                stack.push(t);
            }
        }
        while let Some(t) = stack.pop() {
            if std::mem::replace(&mut live[t.index()], true) {
                continue;
            }
            stack.extend(self.node(t).srcs.iter().flatten().copied());
        }
        let mut remap = vec![None; n];
        let mut out = Graph::new();
        for t in self.ids() {
            if !live[t.index()] {
                continue;
            }
            let mut node = self.node(t).clone();
            for s in node.srcs.iter_mut().flatten() {
                *s = remap[s.index()].expect("sources precede their users and are live");
            }
            let id = TensorId(out.nodes.len() as u32);
            out.nodes.push(node);
            if let Some(w) = self.weights.get(&t) {
                out.weights.insert(id, w.clone());
            }
            remap[t.index()] = Some(id);
        }
        out.outputs = self
            .outputs
            .iter()
            .map(|o| remap[o.index()].expect("outputs are live"))
            .collect();
        (out, remap)
    }
}

/// Formats dtypes of a node and its sources for error messages: `"f32 <- q4_0, f32"`.
pub fn dtypes_str(graph: &Graph, node: &Node) -> String {
    let srcs: Vec<String> = node
        .srcs
        .iter()
        .map(|s| s.map_or("-".to_string(), |s| graph.dtype(s).name().to_string()))
        .collect();
    format!("{} <- {}", node.dtype, srcs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::UnaryOp;

    #[test]
    fn dead_nodes_are_removed_and_state_writes_kept() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [4, 2, 1, 1]).unwrap();
        let dead = g.unary(x, UnaryOp::Exp).unwrap();
        let _dead2 = g.unary(dead, UnaryOp::Neg).unwrap();
        let kv = g.state("kv", DType::F32, [4, 8, 1, 1]).unwrap();
        let idx = g.input("idx", DType::I32, [2, 1, 1, 1]).unwrap();
        let _w = g.set_rows(kv, x, idx).unwrap();
        let y = g.unary(x, UnaryOp::Relu).unwrap();
        g.mark_output(y).unwrap();
        let (p, remap) = g.eliminate_dead();
        assert_eq!(p.nodes().len(), 5);
        assert_eq!(remap[dead.index()], None);
        assert_eq!(p.outputs(), &[remap[y.index()].unwrap()]);
        assert_eq!(
            p.node(remap[y.index()].unwrap()).op,
            Op::Unary(UnaryOp::Relu)
        );
    }

    #[test]
    fn weights_must_have_exact_bytes() {
        let mut g = Graph::new();
        assert!(g
            .weight("w", DType::Q4_0, [32, 2, 1, 1], Bytes::from(vec![0u8; 36]))
            .is_ok());
        let e = g
            .weight("w", DType::Q4_0, [32, 2, 1, 1], Bytes::from(vec![0u8; 35]))
            .unwrap_err();
        assert!(e.to_string().contains("needs 36 bytes"), "{e}");
    }

    #[test]
    fn resident_weights_name_their_device_tensor_and_have_no_host_bytes() {
        let mut g = Graph::new();
        let w = g
            .resident_weight("blk.0.w", DType::Q4_0, [32, 2, 1, 1])
            .unwrap();
        let b = g
            .weight("b", DType::F32, [32, 1, 1, 1], Bytes::from(vec![0u8; 128]))
            .unwrap();
        let y = g.mul_mat(w, b).unwrap();
        g.mark_output(y).unwrap();
        assert_eq!(g.node(w).span_bytes(), 36);
        assert_eq!(
            g.weight_source(w),
            Some(&WeightData::Resident("blk.0.w".into()))
        );
        assert!(g.weight_data(w).is_none());
        let e = g.weight_bytes(w).unwrap_err().to_string();
        assert!(e.contains("'blk.0.w' is resident on a device"), "{e}");
        assert_eq!(g.weight_bytes(b).unwrap().len(), 128);
        assert!(g.weight_bytes(y).is_err());
        let (p, remap) = g.eliminate_dead();
        let w2 = remap[w.index()].unwrap();
        assert_eq!(p.weight_source(w2), g.weight_source(w));
    }

    #[test]
    fn root_follows_views_and_inplace_writes() {
        let mut g = Graph::new();
        let s = g.state("s", DType::F32, [8, 4, 1, 1]).unwrap();
        let v = g.view(s, [8, 2, 1, 1], [4, 32, 64, 64], 32).unwrap();
        let t = g.transpose(v).unwrap();
        assert_eq!(g.root(t), s);
        assert_eq!(g.node(t).layout.offset, 32);
    }
}
