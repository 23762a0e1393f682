//! `wgllm synth`: write a GGUF with random weights and the exact tensor shapes of a real model,
//! to measure speed at real sizes where the real model cannot be downloaded.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use wgllm_core::DType;
use wgllm_gguf::{GgufFile, GgufWriter, Value};
use wgllm_models::synth::{model_gguf, LlamaShape, SynthArch};

/// Real model shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// A tiny llama (2 layers, 64 wide, 300-token byte vocabulary) for tests.
    Tiny,
    #[value(name = "smollm2-135m")]
    Smollm2_135m,
    #[value(name = "llama-3.2-1b")]
    Llama32_1b,
    #[value(name = "llama-3.1-8b")]
    Llama31_8b,
    #[value(name = "qwen3-0.6b")]
    Qwen3_0_6b,
    #[value(name = "qwen3-8b")]
    Qwen3_8b,
    /// Qwen3-30B-A3B: 48 layers of 128 experts (768 wide), 8 a token.
    #[value(name = "qwen3-30b-a3b")]
    Qwen3_30bA3b,
    #[value(name = "gemma3-270m")]
    Gemma3_270m,
    /// A tiny BERT encoder (2 layers, 64 wide, 300-token WordPiece vocabulary) for tests.
    #[value(name = "bert-tiny")]
    BertTiny,
    /// all-MiniLM-L6-v2's shapes: 6 layers, 384 wide (an embedding model).
    #[value(name = "minilm-l6")]
    MinilmL6,
    /// BGE-base / E5-base's shapes: 12 layers, 768 wide (an embedding model).
    #[value(name = "bge-base")]
    BgeBase,
    /// Whisper tiny (multilingual): 4 + 4 layers, 384 wide (a speech model, GGUF form).
    #[value(name = "whisper-tiny")]
    WhisperTiny,
    /// Whisper tiny.en: English-only.
    #[value(name = "whisper-tiny.en")]
    WhisperTinyEn,
    #[value(name = "whisper-base")]
    WhisperBase,
    #[value(name = "whisper-small")]
    WhisperSmall,
    #[value(name = "whisper-medium")]
    WhisperMedium,
    /// Whisper large-v3: 32 + 32 layers, 1280 wide, 128 mel bins.
    #[value(name = "whisper-large-v3")]
    WhisperLargeV3,
    /// Whisper large-v3-turbo: large-v3's encoder, a 4-layer decoder.
    #[value(name = "whisper-large-v3-turbo")]
    WhisperLargeV3Turbo,
    /// A small multilingual Whisper (2 + 2 layers, 64 wide, 64 text positions) for tests.
    #[value(name = "whisper-test")]
    WhisperTest,
}

impl Preset {
    /// The speech preset's name in `wgllm_speech::synth`, for Whisper shapes.
    fn whisper(self) -> Option<&'static str> {
        Some(match self {
            Preset::WhisperTiny => "whisper-tiny",
            Preset::WhisperTinyEn => "whisper-tiny.en",
            Preset::WhisperBase => "whisper-base",
            Preset::WhisperSmall => "whisper-small",
            Preset::WhisperMedium => "whisper-medium",
            Preset::WhisperLargeV3 => "whisper-large-v3",
            Preset::WhisperLargeV3Turbo => "whisper-large-v3-turbo",
            Preset::WhisperTest => "whisper-test",
            _ => return None,
        })
    }

    /// The context the real model was trained for (its GGUF's `context_length`): what `bench
    /// -d` and `-c` may reach on the synthetic file.
    fn n_ctx_train(self) -> u64 {
        match self {
            Preset::Tiny | Preset::Smollm2_135m => 8192,
            Preset::Llama32_1b | Preset::Llama31_8b => 131_072,
            Preset::Qwen3_0_6b | Preset::Qwen3_8b | Preset::Qwen3_30bA3b => 40_960,
            Preset::Gemma3_270m => 32_768,
            Preset::BertTiny => 128,
            Preset::MinilmL6 | Preset::BgeBase => 512,
            // Whisper's text context.
            _ => 448,
        }
    }

    /// Architecture and shape of the preset.
    pub fn shape(self) -> (SynthArch, LlamaShape) {
        let n_ctx_train = self.n_ctx_train();
        let s = |n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv, rope_base, tied_output| {
            LlamaShape {
                n_vocab,
                n_embd,
                n_layer,
                n_ff,
                n_head,
                n_head_kv,
                n_ctx_train,
                rope_base,
                tied_output,
            }
        };
        match self {
            Preset::Tiny => (SynthArch::Llama, s(300, 64, 2, 128, 4, 2, 10_000.0, false)),
            Preset::Smollm2_135m => (
                SynthArch::Llama,
                s(49_152, 576, 30, 1536, 9, 3, 100_000.0, true),
            ),
            Preset::Llama32_1b => (
                SynthArch::Llama,
                s(128_256, 2048, 16, 8192, 32, 8, 500_000.0, true),
            ),
            Preset::Llama31_8b => (
                SynthArch::Llama,
                s(128_256, 4096, 32, 14_336, 32, 8, 500_000.0, false),
            ),
            Preset::Qwen3_0_6b => (
                SynthArch::Qwen3 { head_dim: 128 },
                s(151_936, 1024, 28, 3072, 16, 8, 1e6, true),
            ),
            Preset::Qwen3_8b => (
                SynthArch::Qwen3 { head_dim: 128 },
                s(151_936, 4096, 36, 12_288, 32, 8, 1e6, false),
            ),
            Preset::Qwen3_30bA3b => (
                SynthArch::Qwen3Moe {
                    head_dim: 128,
                    n_expert: 128,
                    n_used: 8,
                    n_ff_exp: 768,
                },
                s(151_936, 2048, 48, 6144, 32, 4, 1e6, false),
            ),
            Preset::Gemma3_270m => (
                SynthArch::Gemma3 {
                    head_dim: 256,
                    window: 512,
                },
                s(262_144, 640, 18, 2048, 4, 1, 1e6, true),
            ),
            Preset::BertTiny => (SynthArch::Bert, s(300, 64, 2, 128, 4, 4, 0.0, true)),
            Preset::MinilmL6 => (SynthArch::Bert, s(30_522, 384, 6, 1536, 12, 12, 0.0, true)),
            Preset::BgeBase => (SynthArch::Bert, s(30_522, 768, 12, 3072, 12, 12, 0.0, true)),
            // Speech presets are written by `wgllm_speech::synth` (see `whisper`).
            _ => (SynthArch::Llama, s(300, 64, 2, 128, 4, 4, 1e4, false)),
        }
    }
}

/// Arguments of `wgllm synth`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The real model whose shapes to copy.
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// Weight format of the matrices (norms stay f32): q4_0, q4_k, q8_0, f16, …
    #[arg(long, default_value = "q4_0")]
    pub dtype: String,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Take the tokenizer (vocabulary, merges, special tokens, chat template: every
    /// `tokenizer.*` key) from this GGUF, whose vocabulary must be the preset's size, so chat
    /// templates and grammars behave as on the real model.
    #[arg(long, value_name = "GGUF")]
    pub vocab_from: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
}

/// `file` (a written GGUF) with the `tokenizer.*` metadata of the GGUF at `from`.
fn with_vocab_of(file: Vec<u8>, from: &std::path::Path) -> Result<Vec<u8>> {
    let src = GgufFile::open(from).with_context(|| format!("opening {}", from.display()))?;
    let file = GgufFile::from_bytes(file.into())?;
    let count = |f: &GgufFile| match f.metadata().get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    };
    let (want, got) = (count(&file), count(&src));
    if want != got {
        bail!(
            "{} has {got} tokens where the preset's vocabulary has {want}",
            from.display()
        );
    }
    let vocab = src
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()));
    Ok(GgufWriter::with_metadata(&file, vocab)?.to_vec())
}

/// Writes the file and reports its size.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let Some(dtype) = DType::from_name(&args.dtype) else {
        bail!("unknown weight format '{}'", args.dtype);
    };
    if !wgllm_core::quant::can_quantize(dtype) {
        bail!("wgllm cannot quantize to {dtype} (it has no quantizer for that format)");
    }
    let bytes = match args.preset.whisper() {
        Some(name) => {
            let c = wgllm_speech::synth::preset(name).expect("every Whisper preset has a shape");
            wgllm_speech::synth::whisper_gguf(&c, dtype, args.seed)?
        }
        None => {
            let (arch, shape) = args.preset.shape();
            model_gguf(arch, &shape, dtype, args.seed)?
        }
    };
    let bytes = match &args.vocab_from {
        Some(from) => with_vocab_of(bytes, from)?,
        None => bytes,
    };
    std::fs::write(&args.output, &bytes)
        .with_context(|| format!("writing {}", args.output.display()))?;
    writeln!(
        out,
        "{}: {:?} {dtype}, {} bytes",
        args.output.display(),
        args.preset,
        bytes.len()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Preset;

    /// Each preset's file says the context the real model was trained for, so long-context
    /// benchmarks (`bench -d`) reach what the real model would.
    #[test]
    fn presets_carry_the_real_training_context() {
        for (preset, ctx) in [
            (Preset::Tiny, 8192),
            (Preset::Smollm2_135m, 8192),
            (Preset::Llama32_1b, 131_072),
            (Preset::Llama31_8b, 131_072),
            (Preset::Qwen3_0_6b, 40_960),
            (Preset::Qwen3_8b, 40_960),
            (Preset::Qwen3_30bA3b, 40_960),
            (Preset::Gemma3_270m, 32_768),
        ] {
            assert_eq!(preset.shape().1.n_ctx_train, ctx, "{preset:?}");
        }
    }
}
