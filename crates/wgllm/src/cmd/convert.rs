//! `wgllm convert`: a Hugging Face checkpoint folder into one GGUF file (llama.cpp's
//! `convert_hf_to_gguf.py` without Python or PyTorch); a Whisper model (whisper.cpp's
//! `ggml-*.bin`, or a CTranslate2 folder as faster-whisper uses) into the GGUF form
//! `docs/whisper-gguf.md` describes.

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
    wgllm convert ./all-MiniLM-L6-v2 -o minilm.q8_0.gguf --type q8_0\n  \
    wgllm convert ggml-base.en.bin -o whisper-base.en.gguf          (whisper.cpp's format)\n  \
    wgllm convert ./faster-whisper-small -o whisper-small.gguf      (CTranslate2 float16)\n  \
    wgllm convert whisper-small.gguf -o ggml-small.bin             (back to whisper.cpp's format)\n\n\
    Architectures: BertModel (bert), LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2),\n\
    Qwen3ForCausalLM and Qwen3Model (qwen3; Qwen3-Embedding), with byte-level BPE tokenizers (Llama 3, Qwen, SmolLM, GPT-2\n\
    pre-tokenizers). Vectors (norms, biases) stay f32; a matrix whose rows are not whole\n\
    blocks of the asked type is stored as f16.")]
pub struct Args {
    /// The checkpoint folder (config.json, *.safetensors and tokenizer.json), a whisper.cpp
    /// model file, or a CTranslate2 Whisper folder (model.bin, vocabulary.txt).
    pub dir: PathBuf,
    /// The GGUF file to write.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k...
    #[arg(long = "type", default_value = "f16", value_name = "TYPE")]
    pub dtype: String,
}

/// Writes the GGUF form of a Whisper model (weights as stored: whisper.cpp's types, or the
/// checkpoint's f16/f32; a CTranslate2 one also widened to f32) and reports it.
fn convert_whisper(args: &Args, out: &mut impl Write) -> Result<()> {
    let f32 = match (args.dtype.as_str(), args.dir.is_dir()) {
        ("f16", _) => false,
        ("f32", true) => true,
        (t, _) => bail!(
            "a Whisper model is written with its weights as stored (a CTranslate2 folder also as f32); --type {t} is not offered for it"
        ),
    };
    if wgllm_speech::open::is_whisper_file(&args.dir) && !is_ggml(&args.dir) {
        if f32 || args.out.extension().is_none_or(|e| e != "bin") {
            bail!("a Whisper GGUF converts to whisper.cpp's format: give -o NAME.bin (weights as stored)");
        }
        let m = wgllm_speech::WhisperModel::open(&args.dir)?;
        let bytes = wgllm_speech::ggml_bin::from_model(&m)?;
        std::fs::write(&args.out, &bytes)
            .with_context(|| format!("writing {}", args.out.display()))?;
        writeln!(
            out,
            "{}: whisper.cpp's format, {} bytes",
            args.out.display(),
            bytes.len()
        )?;
        return Ok(());
    }
    let w = if args.dir.is_dir() {
        wgllm_speech::ct2::convert(&args.dir, f32)?
    } else {
        let bytes =
            std::fs::read(&args.dir).with_context(|| format!("reading {}", args.dir.display()))?;
        wgllm_speech::ggml_bin::to_writer(&bytes)?
    };
    let f = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut f = std::io::BufWriter::new(f);
    w.write_to(&mut f)?;
    f.flush()?;
    let written = std::fs::metadata(&args.out)?.len();
    writeln!(out, "{}: whisper, {} bytes", args.out.display(), written)?;
    Ok(())
}

/// Whether `path` is whisper.cpp's model file.
fn is_ggml(path: &std::path::Path) -> bool {
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| wgllm_speech::ggml_bin::is_ggml_bin(&head))
}

/// Whether `path` is a Whisper model `convert` reads: whisper.cpp's file, a CTranslate2 folder,
/// or the GGUF form (written back as whisper.cpp's file).
fn is_whisper_source(path: &std::path::Path) -> bool {
    if path.is_dir() {
        return path.join("model.bin").exists() && path.join("vocabulary.txt").exists();
    }
    wgllm_speech::open::is_whisper_file(path)
}

/// Converts and reports what was written.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    if is_whisper_source(&args.dir) {
        return convert_whisper(args, out)
            .with_context(|| format!("converting {}", args.dir.display()));
    }
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
