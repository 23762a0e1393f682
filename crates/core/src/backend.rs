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
}

/// A compiled graph.
pub trait Executable {
    /// Runs the graph once. `inputs` gives the contiguous bytes of every `Input` leaf.
    fn run(&mut self, inputs: &[(TensorId, &[u8])]) -> Result<()>;

    /// Reads an output or `State` tensor as contiguous bytes of its dtype.
    fn read(&mut self, t: TensorId) -> Result<Vec<u8>>;

    /// Overwrites a `State` tensor with contiguous bytes of its dtype.
    fn write(&mut self, t: TensorId, data: &[u8]) -> Result<()>;
}
