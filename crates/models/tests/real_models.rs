//! Real-model checks against fixtures from the independent numpy reference
//! (`scripts/reference/`). They need the model files in the cache, so they are ignored by
//! default: run `wgllm pull smollm2` (and `wgllm pull gemma3-270m`), then
//! `cargo test -p wgllm-models --release --test real_models -- --ignored`.

use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::config::model_cache_dir;
use wgllm_models::{Session, SessionConfig};

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn greedy(file: &str, prompt: &[u32], n: usize) -> Vec<u32> {
    let f =
        GgufFile::open(model_cache_dir().join(file)).expect("model in the cache (run wgllm pull)");
    let cfg = SessionConfig {
        n_ctx: 256,
        ubatch: 32,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let mut s = Session::new(&CpuBackend, &f, cfg).unwrap();
    let mut logits = s.eval(prompt).unwrap();
    let mut out = vec![];
    for _ in 0..n {
        let t = argmax(&logits[0]);
        out.push(t);
        logits = s.eval(&[t]).unwrap();
    }
    out
}

#[test]
#[ignore = "needs SmolLM2 in the model cache"]
fn smollm2_greedy_capital_of_france() {
    // "The capital of France is"
    let out = greedy(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        &[504, 3575, 282, 4649, 314],
        16,
    );
    println!("{out:?}");
}
