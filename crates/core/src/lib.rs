//! wgllm-core: the tensor core every other wgllm crate builds on.
//!
//! - [`DType`]: plain scalars and every GGUF block-quantized format, with bit-exact
//!   (de)quantization in [`quant`].
//! - [`Layout`]: ggml-style 4-D extents, byte strides and offsets; views without copies.
//! - [`Graph`]: the IR, a closed [`Op`] set with typed parameters and validating builders.
//! - [`plan`]: graph passes: dead-node elimination and the liveness memory planner.
//! - [`Backend`]: the trait the CPU reference and the WebGPU backend implement.

pub mod backend;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod layout;
pub mod op;
pub mod plan;
pub mod quant;

pub use backend::{Backend, Executable};
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::{Graph, Node, TensorId};
pub use layout::Layout;
pub use op::Op;
