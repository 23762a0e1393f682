//! `wgllm convert`: a Hugging Face checkpoint folder into one GGUF file (llama.cpp's
//! `convert_hf_to_gguf.py` without Python or PyTorch).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressStyle};
use wgllm_core::DType;
use wgllm_models::convert;

/// Arguments of `wgllm convert`.
#[derive(ClapArgs, Debug)]
#[command(after_help = "Examples:\n  \
    wgllm convert ./all-MiniLM-L6-v2 -o minilm.f16.gguf\n  \
    wgllm convert ./all-MiniLM-L6-v2 -o minilm.q8_0.gguf --type q8_0\n\n\
    Architectures: BertModel (bert), LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2),\n\
    Qwen3ForCausalLM and Qwen3Model (qwen3; Qwen3-Embedding), with byte-level BPE tokenizers (Llama 3, Qwen, SmolLM, GPT-2\n\
    pre-tokenizers). Vectors (norms, biases) stay f32; a matrix whose rows are not whole\n\
    blocks of the asked type is stored as f16.")]
pub struct Args {
    /// The checkpoint folder: config.json, *.safetensors and tokenizer.json.
    pub dir: PathBuf,
    /// The GGUF file to write.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k...
    #[arg(long = "type", default_value = "f16", value_name = "TYPE")]
    pub dtype: String,
}

/// Converts and reports what was written.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let Some(dtype) = DType::from_name(&args.dtype) else {
        bail!(
            "unknown weight type '{}' (f32, f16, bf16, q8_0, q4_0, q4_k...)",
            args.dtype
        );
    };
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("wgllm: converting [{bar:40}] {pos}/{len} tensors")
            .expect("static template")
            .progress_chars("=> "),
    );
    let done = convert::convert(&args.dir, dtype, &args.out, |i, n| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
    })
    .with_context(|| format!("converting {}", args.dir.display()))?;
    bar.finish_and_clear();
    let types: Vec<String> = done
        .dtypes
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    writeln!(
        out,
        "{}: {} ({} tensors: {}), {} bytes",
        args.out.display(),
        done.arch,
        done.tensors,
        types.join(", "),
        done.bytes
    )?;
    Ok(())
}
