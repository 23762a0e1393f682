//! wgllm-gguf
