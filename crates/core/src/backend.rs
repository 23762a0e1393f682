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

/// What [`Executable::finish`] returns: the bytes of each output the run was submitted with.
pub type FinishFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<Vec<u8>>>> + 'a>>;

/// Where tickets made by [`Ticket::pending_reported`] put their id when they are dropped
/// without being finished, so the backend can take back what their runs hold.
pub type Abandoned = std::sync::Arc<std::sync::Mutex<Vec<u64>>>;

/// A run queued by [`Executable::submit`], redeemed by [`Executable::finish`] of the same
/// executable.
#[derive(Debug)]
#[must_use = "a submitted run's outputs are read by finishing its ticket"]
pub struct Ticket {
    id: u64,
    ready: Option<Vec<Vec<u8>>>,
    /// Told this ticket's id if it is dropped unfinished.
    abandoned: Option<Abandoned>,
}

impl Ticket {
    /// A run whose outputs the backend will read when the ticket is finished; `id` is the
    /// backend's own.
    pub fn pending(id: u64) -> Ticket {
        Ticket {
            id,
            ready: None,
            abandoned: None,
        }
    }

    /// [`Ticket::pending`] that pushes `id` onto `abandoned` when dropped without being
    /// finished (a step queued ahead of a generation that an error ended).
    pub fn pending_reported(id: u64, abandoned: &Abandoned) -> Ticket {
        Ticket {
            id,
            ready: None,
            abandoned: Some(abandoned.clone()),
        }
    }

    /// A run whose outputs were read when it was submitted.
    pub fn ready(outputs: Vec<Vec<u8>>) -> Ticket {
        Ticket {
            id: 0,
            ready: Some(outputs),
            abandoned: None,
        }
    }

    /// The backend's id of a pending run.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The outputs of a ticket made by [`Ticket::ready`]; the ticket counts as finished.
    pub fn into_ready(mut self) -> Option<Vec<Vec<u8>>> {
        self.abandoned = None;
        self.ready.take()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(ids) = self.abandoned.take() {
            // A poisoned list only loses the reclaim, never the drop.
            if let Ok(mut ids) = ids.lock() {
                ids.push(self.id);
            }
        }
    }
}

/// [`Executable::submit`] done by waiting: each feed is read and passed as an input, the graph
/// run, and the outputs read. The provided `submit`, and what a backend does while profiling.
pub fn submit_blocking(
    exe: &mut (impl Executable + ?Sized),
    inputs: &[(TensorId, &[u8])],
    feeds: &[(TensorId, TensorId)],
    outputs: &[TensorId],
) -> Result<Ticket> {
    let fed = feeds
        .iter()
        .map(|&(input, src)| Ok((input, exe.read(src)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut all = inputs.to_vec();
    all.extend(fed.iter().map(|(t, d)| (*t, &d[..])));
    exe.run(&all)?;
    let out = outputs
        .iter()
        .map(|&t| exe.read(t))
        .collect::<Result<Vec<_>>>()?;
    Ok(Ticket::ready(out))
}

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

    /// Queues one run and the read-back of `outputs` as the run leaves them, without waiting for
    /// either; [`Executable::finish`] waits for the bytes. `feeds` are `(input, source)` pairs:
    /// before the run, input `input` takes the bytes that source tensor `source` of this
    /// executable holds (an output or state, of the same size), as the previous run left it —
    /// so a decode step's argmax becomes the next step's token without a trip to the host, and
    /// the host can queue step `t + 1` before it has read step `t`. Inputs given neither in
    /// `inputs` nor as a feed are an error.
    ///
    /// The provided method waits ([`submit_blocking`]); backends that queue work override it.
    fn submit(
        &mut self,
        inputs: &[(TensorId, &[u8])],
        feeds: &[(TensorId, TensorId)],
        outputs: &[TensorId],
    ) -> Result<Ticket> {
        submit_blocking(self, inputs, feeds, outputs)
    }

    /// The outputs of a submitted run, in the order they were asked for, once the device has
    /// made them.
    fn finish(&mut self, ticket: Ticket) -> FinishFuture<'_> {
        Box::pin(std::future::ready(ticket.into_ready().ok_or_else(|| {
            crate::Error::graph("this ticket was not made by this executable")
        })))
    }
}
