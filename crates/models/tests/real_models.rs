//! SmolLM2-135M Q4_1 against the independent numpy reference (`scripts/reference/`): greedy
//! tokens, top logits, and perplexity on the committed text.
//!
//! They need the model file in the cache, so they are ignored by default: run
//! `wgllm pull smollm2`, then `cargo test -p wgllm-models --release --test real_models -- --ignored`.
//! The same checks on the WebGPU backend live in `crates/webgpu/tests/`.

use serde_json::Value;
use wgllm_core::{Backend, DType};
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::config::model_cache_dir;
use wgllm_models::perplexity::perplexity;
use wgllm_models::sampler::argmax;
use wgllm_models::tokenizer::Tokenizer;
use wgllm_models::{Session, SessionConfig};

const FIXTURE: &str = include_str!("fixtures/reference/smollm2.json");
const PPL_TEXT: &str = include_str!("fixtures/reference/ppl.txt");

fn model() -> GgufFile {
    GgufFile::open(model_cache_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf"))
        .expect("SmolLM2 in the cache: run `wgllm pull smollm2`")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy tokens and the logits at every step, on `backend`.
fn check_prompts(backend: &dyn Backend) {
    let fx: Value = serde_json::from_str(FIXTURE).unwrap();
    let f = model();
    let cfg = SessionConfig {
        n_ctx: 128,
        ubatch: 64,
        kv_dtype: DType::F32,
        all_logits: false,
    };
    let mut s = Session::new(backend, &f, cfg).unwrap();
    for p in fx["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let prompt = ids(&p["ids"]);
        let want = ids(&p["greedy"]["ids"]);
        let margins: Vec<f64> = p["greedy"]["top2_margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();
        // Compare up to the first near-tie of the reference (a different rounding may fairly
        // pick the other token there).
        let agree_until = margins.iter().position(|&m| m < 0.05).unwrap_or(want.len());
        s.reset();
        let mut logits = s.eval(&prompt).unwrap();
        let mut got = vec![];
        let mut all_logits = vec![logits[0].clone()];
        for _ in 0..agree_until {
            let t = argmax(&logits[0]);
            got.push(t);
            logits = s.eval(&[t]).unwrap();
            all_logits.push(logits[0].clone());
        }
        assert!(
            agree_until >= 16,
            "{name}: the reference has a near-tie at step {agree_until}"
        );
        assert_eq!(got, want[..agree_until], "{name}: greedy tokens differ");
        // Top-20 logits at each fixture position (position = prompt.len()-1+k predicts step k).
        let mut worst = 0.0f64;
        for l in p["logits"].as_array().unwrap() {
            let k = l["position"].as_u64().unwrap() as usize + 1 - prompt.len();
            if k >= all_logits.len() {
                continue;
            }
            for (id, v) in ids(&l["top_ids"])
                .iter()
                .zip(l["top_logits"].as_array().unwrap())
            {
                worst = worst.max((all_logits[k][*id as usize] as f64 - v.as_f64().unwrap()).abs());
            }
        }
        // Weights are dequantized identically; the difference is f32 summation order only.
        assert!(worst < 0.02, "{name}: top logits differ by up to {worst}");
        println!("{name}: {agree_until} greedy tokens agree, top logits within {worst:.2e}");
    }
}

#[test]
#[ignore = "needs SmolLM2 in the model cache"]
fn smollm2_matches_reference_on_cpu() {
    check_prompts(&CpuBackend);
}

#[test]
#[ignore = "needs SmolLM2 in the model cache"]
fn smollm2_tokenizes_and_scores_perplexity_like_the_reference() {
    let fx: Value = serde_json::from_str(FIXTURE).unwrap();
    let want = &fx["perplexity"];
    let f = model();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let tokens = tok.encode(PPL_TEXT, true).unwrap();
    assert_eq!(
        tokens.len() as u64,
        want["n_tokens"].as_u64().unwrap(),
        "token count of ppl.txt"
    );
    let n_ctx = want["n_ctx"].as_u64().unwrap() as usize;
    let cfg = SessionConfig {
        n_ctx,
        ubatch: n_ctx,
        kv_dtype: DType::F16,
        all_logits: true,
    };
    let mut s = Session::new(&CpuBackend, &f, cfg).unwrap();
    let bos = if tok.adds_bos() { tok.bos() } else { None };
    let p = perplexity(&mut s, &tokens, n_ctx, bos, |_, _, _| {}).unwrap();
    let ref_ppl = want["ppl"].as_f64().unwrap();
    println!(
        "PPL = {:.4} +/- {:.5} (reference {ref_ppl})",
        p.ppl, p.ppl_err
    );
    assert_eq!(p.chunks as u64, want["n_chunks"].as_u64().unwrap());
    assert!(
        (p.ppl / ref_ppl - 1.0).abs() < 0.01,
        "ppl {} vs reference {ref_ppl}",
        p.ppl
    );
}
