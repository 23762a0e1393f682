#!/usr/bin/env bash
# Builds the wgllm-web package's wasm module into web/pkg: wgllm-web for wasm32, then wasm-bindgen's JS glue
# and TypeScript types (wasm-bindgen-cli must match the wasm-bindgen version in Cargo.lock, as .ci/run installs it).
# Arguments go to cargo (.ci/run passes --locked --test browser: the browser tests' features,
# so it reuses their build).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --target wasm32-unknown-unknown -p wgllm-web --lib "$@"
wasm-bindgen --target web --out-dir web/pkg \
  target/wasm32-unknown-unknown/release/wgllm_web.wasm
