//! The engine under the server on the WebGPU backend (lavapipe in CI): a synthetic llama whose
//! vocabulary is long enough for the two-stage argmax/top-k kernels, three sequences fed in the
//! same runs (prompts together, then decode steps padded from 3 to 4 tokens), against the CPU
//! reference: the output head's argmax and top-64 ids must agree, logits and candidate values
//! within a tolerance.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::{Readback, RowOut, SeqChunk, Session, SessionConfig};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const PROMPTS: [&[u32]; 3] = [
    &[1, 500, 9, 3, 4077, 12, 40, 2, 95, 0, 33],
    &[7, 7, 4600, 2],
    &[90, 14, 3, 3, 51, 8, 8],
];

fn run(backend: &dyn wgllm_core::Backend, f: &GgufFile) -> Vec<Vec<RowOut>> {
    let cfg = SessionConfig {
        n_ctx: 24,
        ubatch: 8,
        kv_dtype: DType::F16,
        all_logits: false,
    };
    let mut s = Session::with_sequences(backend, f, cfg, 3).unwrap();
    let chunks: Vec<SeqChunk> = (0..3)
        .map(|i| SeqChunk {
            seq: i,
            tokens: PROMPTS[i],
            output: true,
        })
        .collect();
    let mut rows = s.step(&chunks, Readback::Logits).unwrap();
    let mut all = vec![rows.clone()];
    for _ in 0..4 {
        let next: Vec<[u32; 1]> = rows.iter().map(|r| [r.argmax]).collect();
        let chunks: Vec<SeqChunk> = (0..3)
            .map(|i| SeqChunk {
                seq: i,
                tokens: &next[i],
                output: true,
            })
            .collect();
        rows = s.step(&chunks, Readback::Logits).unwrap();
        all.push(rows.clone());
    }
    all
}

#[test]
fn batched_sequences_and_output_head_match_the_cpu() {
    let shape = LlamaShape {
        n_vocab: 5000,
        ..LlamaShape::TINY
    };
    let f = GgufFile::from_bytes(Bytes::from(llama_gguf(&shape, DType::Q8_0, 5).unwrap())).unwrap();
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let want = run(&CpuBackend, &f);
    let got = run(&gpu, &f);
    for (step, (w, g)) in want.iter().zip(&got).enumerate() {
        for (seq, (w, g)) in w.iter().zip(g).enumerate() {
            let (wl, gl) = (w.logits.as_ref().unwrap(), g.logits.as_ref().unwrap());
            let d = wl
                .iter()
                .zip(gl)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(d < 2e-2, "step {step} seq {seq}: logits differ by {d}");
            assert_eq!(g.argmax, w.argmax, "step {step} seq {seq}: argmax");
            let (wt, gt) = (w.top.as_ref().unwrap(), g.top.as_ref().unwrap());
            assert_eq!(gt.len(), 64);
            // The GPU's candidates are exactly its logits' top 64, largest first.
            for (j, &(id, v)) in gt.iter().enumerate() {
                assert_eq!(
                    v, gl[id as usize],
                    "step {step} seq {seq}: value of candidate {j}"
                );
                if j > 0 {
                    assert!(
                        v <= gt[j - 1].1,
                        "step {step} seq {seq}: candidates not sorted"
                    );
                }
            }
            let floor = gt[63].1;
            assert!(
                gl.iter().filter(|&&v| v > floor).count() < 64,
                "step {step} seq {seq}: a logit above the 64th candidate was left out"
            );
            // Against the CPU: the same leading candidates (near-ties may swap further down).
            let same = wt.iter().zip(gt).take_while(|(a, b)| a.0 == b.0).count();
            assert!(
                same >= 8,
                "step {step} seq {seq}: only {same} leading candidates agree"
            );
        }
    }
}
