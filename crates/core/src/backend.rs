//! The backend interface: ask what a backend supports, compile a graph once, run it many times.
//!
//! ## Design
//! A backend turns a [`Graph`] into an [`Executable`] holding everything a run needs (weights
//! uploaded, arena allocated, kernels prepared). A run takes the bytes of the `Input` leaves,
//! executes every node in order, and leaves `State` tensors and outputs readable.

use crate::error::Result;
use crate::graph::{Graph, TensorId};

/// A device that can run graphs (CPU reference, WebGPU).
pub trait Backend {
    /// Short name for tables and errors (`"cpu"`, `"webgpu"`).
    fn name(&self) -> String;

    /// `Ok(())` when the backend can run node `t` of `graph`, else an [`crate::Error::Unsupported`]
    /// that names the op, its dtypes and the reason.
    fn supports(&self, graph: &Graph, t: TensorId) -> Result<()>;

    /// Prepares `graph` for repeated runs.
    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>>;

    /// Prepares several graphs whose `State` leaves of equal name share one storage: the prefill
    /// and decode graphs of one model read and write the same KV cache. Equal names must have
    /// equal dtype and extents.
    ///
    /// The provided method compiles each graph on its own and refuses graphs that share a state
    /// name; backends that can share storage override it.
    fn compile_shared(&self, graphs: &[&Graph]) -> Result<Vec<Box<dyn Executable>>> {
        check_shared_states(graphs)?;
        let mut names = std::collections::HashSet::new();
        for g in graphs {
            let own: std::collections::HashSet<&str> = g
                .nodes()
                .iter()
                .filter(|n| n.op == crate::Op::State)
                .map(|n| n.name.as_str())
                .collect();
            if let Some(shared) = own.iter().find(|n| names.contains(*n)) {
                return Err(crate::Error::Unsupported {
                    backend: self.name(),
                    op: "STATE",
                    dtypes: String::new(),
                    why: format!("state '{shared}' would be shared between graphs, which this backend cannot do"),
                });
            }
            names.extend(own);
        }
        graphs.iter().map(|g| self.compile(g)).collect()
    }
}

/// Checks that `State` leaves of equal name agree in dtype and extents across `graphs`.
pub fn check_shared_states(graphs: &[&Graph]) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, (crate::DType, [u64; 4])> = Default::default();
    for g in graphs {
        for n in g.nodes().iter().filter(|n| n.op == crate::Op::State) {
            let this = (n.dtype, n.layout.ne);
            if let Some(prev) = seen.insert(&n.name, this) {
                if prev != this {
                    return Err(crate::Error::graph(format!(
                        "state '{}' is {} {:?} in one graph and {} {:?} in another",
                        n.name, prev.0, prev.1, this.0, this.1
                    )));
                }
            }
        }
    }
    Ok(())
}

/// What [`Executable::read_async`] returns.
pub type ReadFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>>> + 'a>>;

/// A compiled graph.
pub trait Executable {
    /// Runs the graph once. `inputs` gives the contiguous bytes of every `Input` leaf.
    fn run(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<()>;

    /// Reads an output or `State` tensor as contiguous bytes of its dtype.
    fn read(&mut self, t: TensorId) -> Result<Vec<u8>>;

    /// [`Executable::read`] as a future, for callers that must not block (WebGPU in the browser,
    /// where a readback completes only on a later turn of the event loop). The provided method
    /// reads synchronously; backends whose reads wait on a device override it.
    fn read_async(&mut self, t: TensorId) -> ReadFuture<'_> {
        Box::pin(std::future::ready(self.read(t)))
    }

    /// Overwrites a `State` tensor with contiguous bytes of its dtype.
    fn write(&mut self, t: TensorId, data: &[u8]) -> Result<()>;
}
