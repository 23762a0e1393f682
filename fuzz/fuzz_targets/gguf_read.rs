//! Parses arbitrary bytes as a GGUF file. Parsing must never panic, and a file that parses must
//! hand out every tensor's data, with the advertised size, and answer every typed getter.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wgllm_gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(bytes::Bytes::copy_from_slice(data)) else {
        return;
    };
    for t in file.tensors() {
        let bytes = file
            .tensor_data(t)
            .expect("a parsed file's own tensor has data");
        assert_eq!(bytes.len() as u64, t.size());
        black_box(bytes.iter().fold(0u8, |acc, b| acc ^ b));
        assert_eq!(
            file.tensor_bytes(t).map(|b| b.len()).ok(),
            Some(bytes.len())
        );
        assert_eq!(file.tensor(t.name()), Some(t));
    }
    for (key, value) in file.metadata() {
        black_box(value.to_string());
        black_box(file.get_u32(key).ok());
        black_box(file.get_f32(key).ok());
        black_box(file.get_str(key).ok());
        black_box(file.get_array(key).map(|a| a.len()).ok());
    }
});
