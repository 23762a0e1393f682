//! wgllm-cpu: the reference backend. Every op, written plainly (f32 accumulation, ggml's
//! formulas), parallel with rayon only where it matters (matrix products, attention).
//!
//! It is the oracle every GPU kernel is tested against, so clarity beats speed here: sources are
//! gathered into dense f32 ([`store::Dense`]), computed, and scattered back through the result's
//! layout and dtype.

mod ops;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wgllm_core::backend::check_shared_states;
use wgllm_core::plan::plan_memory;
use wgllm_core::{Backend, DType, Error, Executable, Graph, Node, Op, Result, TensorId};

use store::{Dense, Rows, Store};

/// The CPU reference backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn supports(&self, graph: &Graph, t: TensorId) -> Result<()> {
        // Builders validate dtypes and shapes; the reference implements every op for every dtype
        // they accept.
        graph.try_node(t).map(|_| ())
    }

    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        let mut v = self.compile_shared(&[graph])?;
        Ok(v.pop().expect("one executable per graph"))
    }

    fn compile_shared(&self, graphs: &[&Graph]) -> Result<Vec<Box<dyn Executable>>> {
        check_shared_states(graphs)?;
        let states: SharedStates = Default::default();
        let mut out: Vec<Box<dyn Executable>> = Vec::with_capacity(graphs.len());
        for graph in graphs {
            for t in graph.ids() {
                self.supports(graph, t)?;
            }
            let plan = plan_memory(graph, 16);
            let mut store = Store::new(graph, plan)?;
            // State buffers live in the shared pool; each run borrows them.
            let mut pool = states
                .lock()
                .map_err(|_| Error::graph("state pool poisoned"))?;
            for t in graph.ids() {
                let n = graph.node(t);
                if n.op == Op::State {
                    let buf = store.leaves.remove(&t).expect("states have buffers");
                    pool.entry(n.name.clone()).or_insert(buf);
                }
            }
            drop(pool);
            out.push(Box::new(CpuExecutable {
                graph: (*graph).clone(),
                store,
                states: states.clone(),
            }));
        }
        Ok(out)
    }
}

type SharedStates = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// A graph compiled for the CPU.
pub struct CpuExecutable {
    graph: Graph,
    store: Store,
    states: SharedStates,
}

impl CpuExecutable {
    /// Runs `f` with this graph's state buffers moved in from the shared pool, and moves them
    /// back afterwards (also when `f` fails).
    fn with_states<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let states = self.states.clone();
        let mut pool = states
            .lock()
            .map_err(|_| Error::graph("state pool poisoned"))?;
        let ids: Vec<TensorId> = self
            .graph
            .ids()
            .filter(|&t| self.graph.node(t).op == Op::State)
            .collect();
        for &t in &ids {
            let buf = pool
                .remove(&self.graph.node(t).name)
                .expect("every state is in the pool");
            self.store.leaves.insert(t, buf);
        }
        let r = f(self);
        for &t in &ids {
            let buf = self.store.leaves.remove(&t).expect("checked out above");
            pool.insert(self.graph.node(t).name.clone(), buf);
        }
        r
    }

    fn run_inner(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<()> {
        for t in self.graph.ids() {
            if self.graph.node(t).op == Op::Input && !inputs.iter().any(|(i, _)| *i == t) {
                return Err(Error::graph(format!(
                    "input '{}' was not given",
                    self.graph.node(t).name
                )));
            }
        }
        for (t, data) in inputs {
            let node = self.graph.try_node(*t)?;
            if node.op != Op::Input {
                return Err(Error::graph(format!("'{}' is not an input", node.name)));
            }
            let buf = self.store.leaves.get_mut(t).expect("inputs have buffers");
            if buf.len() != data.len() {
                return Err(Error::shape(format!(
                    "input '{}' needs {} bytes, got {}",
                    node.name,
                    buf.len(),
                    data.len()
                )));
            }
            buf.copy_from_slice(data);
        }
        for id in self.graph.ids() {
            let graph = &self.graph;
            let node = graph.node(id);
            let mut ctx = Ctx {
                graph,
                id,
                node,
                store: &mut self.store,
            };
            ops::eval(&mut ctx)
                .map_err(|e| Error::graph(format!("{} '{}': {e}", node.op.name(), node.name)))?;
        }
        Ok(())
    }

    fn read_inner(&mut self, t: TensorId) -> Result<Vec<u8>> {
        let node = self.graph.try_node(t)?;
        let readable = self.graph.outputs().contains(&t)
            || matches!(
                self.graph.node(self.graph.root(t)).op,
                Op::State | Op::Input | Op::Weight
            );
        if !readable {
            return Err(Error::graph(format!(
                "'{}' is not an output; mark it with Graph::mark_output",
                node.name
            )));
        }
        let rows = self.store.rows(&self.graph, t)?;
        let mut out = Vec::with_capacity(node.span_bytes() as usize);
        let l = node.layout;
        let row_bytes = node
            .dtype
            .row_bytes(l.ne[0])
            .ok_or_else(|| Error::shape("row size"))? as usize;
        for [_, i1, i2, i3] in l.rows() {
            let start = l.byte_offset(node.dtype, [0, i1, i2, i3]) as usize;
            if l.rows_contiguous(node.dtype) {
                out.extend_from_slice(&rows.bytes[start..start + row_bytes]);
            } else {
                let ts = node.dtype.type_size();
                for i0 in 0..l.ne[0] as usize {
                    let off = start + i0 * l.nb[0] as usize;
                    out.extend_from_slice(&rows.bytes[off..off + ts]);
                }
            }
        }
        Ok(out)
    }

    fn write_inner(&mut self, t: TensorId, data: &[u8]) -> Result<()> {
        let node = self.graph.try_node(t)?;
        if node.op != Op::State {
            return Err(Error::graph(format!(
                "'{}' is not a state tensor",
                node.name
            )));
        }
        let buf = self.store.leaves.get_mut(&t).expect("states have buffers");
        if buf.len() != data.len() {
            return Err(Error::shape(format!(
                "state '{}' needs {} bytes, got {}",
                node.name,
                buf.len(),
                data.len()
            )));
        }
        buf.copy_from_slice(data);
        Ok(())
    }
}

impl Executable for CpuExecutable {
    fn run(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<()> {
        self.with_states(|this| this.run_inner(inputs))
    }

    fn read(&mut self, t: TensorId) -> Result<Vec<u8>> {
        self.with_states(|this| this.read_inner(t))
    }

    fn write(&mut self, t: TensorId, data: &[u8]) -> Result<()> {
        self.with_states(|this| this.write_inner(t, data))
    }
}

/// What an op implementation sees: its node, read access to sources, write access to its result.
pub(crate) struct Ctx<'a> {
    pub graph: &'a Graph,
    pub id: TensorId,
    pub node: &'a Node,
    pub store: &'a mut Store,
}

impl Ctx<'_> {
    /// Row access to source `i`.
    pub fn src(&self, i: usize) -> Result<Rows<'_>> {
        self.store.rows(self.graph, self.node.src(i)?)
    }

    /// dtype of source `i`.
    pub fn src_dtype(&self, i: usize) -> Result<DType> {
        Ok(self.graph.dtype(self.node.src(i)?))
    }

    /// Source `i` as dense f32.
    pub fn dense(&self, i: usize) -> Result<Dense> {
        self.src(i)?.dense()
    }

    /// Optional source `i` as dense f32.
    pub fn opt_dense(&self, i: usize) -> Result<Option<Dense>> {
        match self.node.opt_src(i) {
            Some(t) => Ok(Some(self.store.rows(self.graph, t)?.dense()?)),
            None => Ok(None),
        }
    }

    /// Integer source `i` as i64 in `ne` order.
    pub fn ints(&self, i: usize) -> Result<Vec<i64>> {
        self.src(i)?.dense_i64()
    }

    /// Extents of the result.
    pub fn out_ne(&self) -> [usize; 4] {
        store::ne_usize(&self.node.layout)
    }

    /// Writes the whole result from dense f32 in `ne` order.
    pub fn write(&mut self, data: &[f32]) -> Result<()> {
        self.store.write_dense(self.graph, self.id, data, None)
    }

    /// Writes only the given flat rows of the result (in-place ops).
    pub fn write_rows(&mut self, data: &[f32], rows: &[usize]) -> Result<()> {
        self.store
            .write_dense(self.graph, self.id, data, Some(rows))
    }

    /// Writes an i32 result in `ne` order.
    pub fn write_i32(&mut self, data: &[i32]) -> Result<()> {
        self.store.write_i32(self.graph, self.id, data)
    }
}
