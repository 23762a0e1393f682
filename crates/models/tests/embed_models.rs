//! Embedding models on the CPU backend: a synthetic BERT (batching, pooling, normalisation, bad
//! input) and all-MiniLM-L6-v2 against the independent numpy reference
//! (`scripts/reference/bert.py`, ids from the `tokenizers` package) in f32, f16 and q8_0.
//!
//! The MiniLM checks need the checkpoint, so they are ignored by default: run
//! `wgllm pull minilm`, then `cargo test -p wgllm-models --test embed_models -- --ignored`.
//! The same checks on WebGPU are in `crates/webgpu/tests/embed_models.rs`.

use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::arch::bert::Pooling;
use wgllm_models::embed::cosine;
use wgllm_models::embed_reference::{
    compare_embeddings, converted_checkpoint, embed_verdict, EmbedFixture,
};
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};
use wgllm_models::{EmbedConfig, Embedder, ModelError, Session, SessionConfig, Truncate};

const FIXTURE: &str = include_str!("fixtures/minilm_embed.json");

fn tiny_bert() -> GgufFile {
    let shape = LlamaShape {
        n_head_kv: 4,
        n_ctx_train: 64,
        ..LlamaShape::TINY
    };
    let bytes = model_gguf(SynthArch::Bert, &shape, DType::F32, 7).unwrap();
    GgufFile::from_bytes(bytes.into()).unwrap()
}

const TEXTS: [&str; 5] = [
    "hello world",
    "a much longer sentence, with punctuation; and digits 42!",
    "x",
    "",
    "the quick brown fox jumps over the lazy dog",
];

fn ids(e: &Embedder, texts: &[&str]) -> Vec<Vec<u32>> {
    texts
        .iter()
        .map(|t| e.tokenize(t, Truncate::No).unwrap())
        .collect()
}

#[test]
fn a_batch_gives_what_each_input_gives_alone() {
    let f = tiny_bert();
    // Small batches: the five inputs take several graph shapes.
    let cfg = EmbedConfig {
        batch_tokens: 128,
        ..EmbedConfig::default()
    };
    let mut e = Embedder::new(&f, cfg).unwrap();
    let ids = ids(&e, &TEXTS);
    assert_eq!(ids[3], vec![101, 102], "an empty text is [CLS] [SEP]");
    let batched = e.embed_ids(&CpuBackend, &ids, false).unwrap();
    for (i, one) in ids.iter().enumerate() {
        let alone = e
            .embed_ids(&CpuBackend, std::slice::from_ref(one), false)
            .unwrap();
        assert_eq!(alone[0].len(), 64);
        let d = alone[0]
            .iter()
            .zip(&batched[i])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(d < 1e-5, "input {i}: batched differs from alone by {d}");
    }
    assert!(cosine(&batched[0], &batched[1]) < 0.9999, "inputs differ");
}

#[test]
fn pooling_and_normalisation_follow_the_token_states() {
    let f = tiny_bert();
    let none = EmbedConfig {
        pooling: Some(Pooling::None),
        ..EmbedConfig::default()
    };
    let mut tokens = Embedder::new(&f, none).unwrap();
    let mut mean = Embedder::new(&f, EmbedConfig::default()).unwrap();
    assert_eq!(mean.pooling(), Pooling::Mean, "the file's pooling");
    let cls_cfg = EmbedConfig {
        pooling: Some(Pooling::Cls),
        ..EmbedConfig::default()
    };
    let mut cls = Embedder::new(&f, cls_cfg).unwrap();
    let last_cfg = EmbedConfig {
        pooling: Some(Pooling::Last),
        ..EmbedConfig::default()
    };
    let mut last = Embedder::new(&f, last_cfg).unwrap();
    let ids = ids(&mean, &TEXTS[..2]);
    let states = tokens.embed_ids(&CpuBackend, &ids, false).unwrap();
    let means = mean.embed_ids(&CpuBackend, &ids, false).unwrap();
    let firsts = cls.embed_ids(&CpuBackend, &ids, false).unwrap();
    let lasts = last.embed_ids(&CpuBackend, &ids, false).unwrap();
    let units = mean.embed_ids(&CpuBackend, &ids, true).unwrap();
    for (i, seq) in ids.iter().enumerate() {
        let rows: Vec<&[f32]> = states[i].chunks(64).collect();
        assert_eq!(rows.len(), seq.len());
        for d in 0..64 {
            let avg = rows.iter().map(|r| r[d]).sum::<f32>() / rows.len() as f32;
            assert!((avg - means[i][d]).abs() < 1e-5, "mean {i}/{d}");
            assert!((rows[0][d] - firsts[i][d]).abs() < 1e-5, "cls {i}/{d}");
            assert!(
                (rows[rows.len() - 1][d] - lasts[i][d]).abs() < 1e-5,
                "last {i}/{d}"
            );
        }
        let n: f32 = units[i].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-5, "unit length, got {n}");
        assert!(cosine(&units[i], &means[i]) > 0.99999);
    }
}

#[test]
fn long_inputs_are_refused_or_cut_keeping_the_separator() {
    let f = tiny_bert();
    let e = Embedder::new(&f, EmbedConfig::default()).unwrap();
    let long = "word ".repeat(100);
    let err = e.tokenize(&long, Truncate::No).unwrap_err();
    assert!(
        matches!(err, ModelError::ContextFull { ctx: 64, .. }),
        "{err}"
    );
    let cut = e.tokenize(&long, Truncate::Yes).unwrap();
    assert_eq!(cut.len(), 64);
    assert_eq!((cut[0], cut[63]), (101, 102), "[CLS] ... [SEP]");
}

#[test]
fn bad_inputs_are_errors_naming_the_cause() {
    let f = tiny_bert();
    let mut e = Embedder::new(&f, EmbedConfig::default()).unwrap();
    let err = e
        .embed_ids(&CpuBackend, &[vec![]], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 0 has 0 tokens"), "{err}");
    let err = e
        .embed_ids(&CpuBackend, &[vec![101, 5000]], false)
        .unwrap_err();
    assert!(matches!(err, ModelError::BadToken(5000)), "{err}");
    let err = e
        .embed_ids(&CpuBackend, &[vec![1; 65]], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("65 tokens"), "{err}");
}

#[test]
fn encoders_and_decoders_refuse_each_others_runner() {
    let bert = tiny_bert();
    let err = Session::new(&CpuBackend, &bert, SessionConfig::default())
        .err()
        .expect("a BERT file is no decoder")
        .to_string();
    assert!(err.contains("is an embedding model"), "{err}");
    let bytes = model_gguf(SynthArch::Llama, &LlamaShape::TINY, DType::F32, 1).unwrap();
    let llama = GgufFile::from_bytes(bytes.into()).unwrap();
    let err = Embedder::new(&llama, EmbedConfig::default())
        .err()
        .expect("a llama file is no embedder")
        .to_string();
    assert!(err.contains("llama (as an embedding model)"), "{err}");
}

/// MiniLM converted to `dtype`, against the reference: ids equal, every cosine >= `min`.
fn check_minilm(dtype: DType, min: f64) {
    let path = converted_checkpoint("minilm", dtype).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let fx = EmbedFixture::parse(FIXTURE).unwrap();
    let reports = compare_embeddings(&CpuBackend, &f, &fx).unwrap();
    for r in &reports {
        println!(
            "{dtype}: cosine {:.8} (alone {:.8}) norm error {:.1e}: {:?}",
            r.cosine_batched, r.cosine_alone, r.norm_error, r.text
        );
    }
    let _ = std::fs::remove_file(&path);
    embed_verdict(&reports, min).unwrap();
}

#[test]
#[ignore = "needs the MiniLM checkpoint (wgllm pull minilm)"]
fn minilm_f32_matches_reference() {
    check_minilm(DType::F32, 0.9999);
}

#[test]
#[ignore = "needs the MiniLM checkpoint (wgllm pull minilm)"]
fn minilm_f16_matches_reference() {
    check_minilm(DType::F16, 0.9999);
}

#[test]
#[ignore = "needs the MiniLM checkpoint (wgllm pull minilm)"]
fn minilm_q8_0_matches_reference() {
    check_minilm(DType::Q8_0, 0.999);
}
