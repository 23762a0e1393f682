//! wgllm-cpu
