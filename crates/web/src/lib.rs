//! wgllm-web: wgllm in the browser. The same crates as native — `wgllm-models` sessions on the
//! `wgllm-webgpu` backend and its WGSL kernels — compiled to `wasm32-unknown-unknown`, where wgpu
//! drives the browser's WebGPU.
//!
//! ## Design
//! - [`engine`]: open a backend without blocking, load a GGUF held in memory, generate with a
//!   text callback. Free of JavaScript types, so the native tests run it too.
//! - [`ops`]: a subset of the op table against the CPU reference, with awaited readbacks.
//! - `bindings` (wasm32 only): the `wasm-bindgen` API the page in `web/` uses: `WebEngine`
//!   (`open`, `load`, `generate` with a per-piece callback) and `runOps`.
//!
//! The browser differs from native in three ways, each handled below this crate: nothing may
//! block (device setup and readbacks are awaited: `WebGpuBackend::new_async`,
//! `Session::step_async`), there is no file system (GGUF from bytes) and no threads (the CPU
//! backend's rayon falls back to the calling thread). Limits and features come from the adapter:
//! without shader-f16 (SwiftShader, many browsers) the KV cache is f32.

pub mod engine;
pub mod ops;

#[cfg(target_arch = "wasm32")]
mod bindings;

pub use engine::{Device, Engine, EngineConfig, WebError};
pub use ops::{run_ops, OpSummary, MODEL_OPS};
