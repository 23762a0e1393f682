//! wgllm-web: wgllm in the browser. The same crates as native — `wgllm-models` sessions on the
//! `wgllm-webgpu` backend and its WGSL kernels — compiled to `wasm32-unknown-unknown`, where wgpu
//! drives the browser's WebGPU.
//!
//! ## Design
//! - [`engine`]: open a backend without blocking, load a GGUF held in memory or streamed in
//!   chunks (on WebGPU each tensor goes to the device as it arrives, the file is never whole in
//!   wasm memory), generate with a text callback, or embed texts with an embedding model. Free
//!   of JavaScript types, so the native tests run it too.
//! - [`ops`]: a subset of the op table against the CPU reference, with awaited readbacks.
//! - `stream` (wasm32 only): a JavaScript `ReadableStream` (`fetch(url).body`, `file.stream()`)
//!   read chunk by chunk into a streamed load.
//! - `bindings` (wasm32 only): the `wasm-bindgen` API the worker of the `wgllm-web` npm
//!   package (`web/lib/`) uses: `WebEngine` (`open`, `setContextLength`, `load`, `loadStream`
//!   with an optional sha256, `generate` and `generateChat` with sampling options and a
//!   per-piece callback, a conversation's earlier turns kept in the KV cache), `embed`,
//!   `transcribe` and `runOps`.
//!
//! The browser differs from native in three ways, each handled below this crate: nothing may
//! block (device setup and readbacks are awaited: `WebGpuBackend::new_async`,
//! `Session::step_async`), there is no file system (GGUF from bytes or a stream) and no threads (the CPU
//! backend's rayon falls back to the calling thread). Limits and features come from the adapter:
//! without shader-f16 (SwiftShader, many browsers) the KV cache is f32.

mod constrained;
pub mod engine;
mod error;
pub mod ops;

#[cfg(target_arch = "wasm32")]
mod bindings;
#[cfg(target_arch = "wasm32")]
pub mod stream;

pub use engine::{Device, Engine, EngineConfig, WebError};
pub use ops::{run_ops, OpSummary, MODEL_OPS};
