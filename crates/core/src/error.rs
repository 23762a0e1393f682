//! Error values of the core crate and of backends (which reuse them).

use crate::dtype::DType;

/// Errors raised while building graphs, planning them, or running them on a backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Extents, strides or element counts that do not fit together.
    #[error("shape error: {what}")]
    Shape { what: String },
    /// An op given a dtype it does not accept.
    #[error("{op}: unsupported dtype combination ({dtypes})")]
    DType { op: &'static str, dtypes: String },
    /// A backend cannot run this node.
    #[error("backend {backend} does not support {op} with {dtypes}{}", if .why.is_empty() { String::new() } else { format!(": {}", .why) })]
    Unsupported {
        backend: String,
        op: &'static str,
        dtypes: String,
        why: String,
    },
    /// Quantizing or dequantizing failed (wrong buffer sizes, no quantizer for the type).
    #[error("{dtype}: {what}")]
    Quant { dtype: DType, what: String },
    /// A tensor id that does not belong to the graph, or a missing input.
    #[error("graph error: {what}")]
    Graph { what: String },
    /// A device-side failure: out of memory, device lost, validation error.
    #[error("device error: {what}")]
    Device { what: String },
}

/// Result with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Shorthand for a [`Error::Graph`].
    pub fn graph(what: impl Into<String>) -> Error {
        Error::Graph { what: what.into() }
    }
    /// Shorthand for a [`Error::Shape`].
    pub fn shape(what: impl Into<String>) -> Error {
        Error::Shape { what: what.into() }
    }
}
