//! Parses a real model file: SmolLM2-135M-Instruct, Q4_1 (98,362,432 bytes, sha256
//! b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53).
//!
//! It lives with the models crate, which knows the model cache. The file is too large for the
//! repository, so this test is `#[ignore]`d: run `wgllm pull smollm2`, then
//! `cargo test -p wgllm-models --test real_gguf -- --ignored`.

use wgllm_core::DType;
use wgllm_gguf::{GgufFile, ValueType};
use wgllm_models::config::model_cache_dir;

const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
#[ignore = "needs SmolLM2-135M-Instruct.Q4_1.gguf in the model cache; see the file's doc"]
fn smollm2_135m_q4_1_parses_with_known_facts() {
    let path = model_cache_dir().join(FILE_NAME);
    let file = GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{e} (see this test's doc for how to fetch the file)"));

    assert_eq!(file.version(), 3);
    assert_eq!(file.file_len(), 98_362_432);
    assert_eq!(file.architecture().unwrap(), "llama");
    assert_eq!(file.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(file.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(file.get_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(file.get_u32("llama.attention.head_count_kv").unwrap(), 3);
    let tokens = file.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.elem_type(), ValueType::String);
    assert_eq!(tokens.len(), 49_152);

    // 30 blocks × 9 tensors + token_embd + output_norm (the output shares token_embd).
    assert_eq!(file.tensors().len(), 272);
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.shape(), &[576, 49_152]);
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.dtype(), DType::Q4_1);
    assert_eq!(q.shape(), &[576, 576]);
    assert_eq!(
        file.tensor("output_norm.weight").unwrap().dtype(),
        DType::F32
    );
    let total: u64 = file.tensors().iter().map(|t| t.size()).sum();
    assert!(file.data_offset() + total <= file.file_len());
    for t in file.tensors() {
        assert_eq!(file.tensor_data(t).unwrap().len() as u64, t.size());
    }
}
