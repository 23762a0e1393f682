//! The models in the cache (`wgllm list`, `wgllm rm`): the GGUF files directly in it (known
//! models and their conversions) and the `hf:` downloads under `hf/OWNER/REPO/REVISION/`.

use std::io;
use std::path::{Path, PathBuf};

use wgllm_core::DType;
use wgllm_gguf::split::{part_name, split_name};
use wgllm_gguf::GgufFile;

use crate::pull::{checkpoint_dir, KnownModel};

/// Where a cached file came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A known model (`wgllm pull NAME`): its name.
    Known(&'static str),
    /// A Hugging Face download: `hf:OWNER/REPO/FILE@REVISION`.
    Hub(String),
    /// Put there by hand or by `wgllm convert -o`.
    Other,
}

/// One GGUF model in the cache: a file, or the files of a split model.
#[derive(Clone, Debug)]
pub struct CachedModel {
    /// The file, or a split model's first file.
    pub path: PathBuf,
    /// A split model's other files that are present (`-00002-of-0000N.gguf` …).
    pub parts: Vec<PathBuf>,
    /// Bytes of the file, or of all the split model's files present.
    pub bytes: u64,
    pub origin: Origin,
    /// `general.architecture`, or why the header did not read.
    pub architecture: Result<String, String>,
    /// The type holding most of the weight bytes.
    pub dtype: Option<DType>,
}

impl CachedModel {
    /// What `wgllm rm` and `-m` take for it: the known name, the `hf:` spec, else the path.
    pub fn name(&self) -> String {
        match &self.origin {
            Origin::Known(n) => (*n).to_string(),
            Origin::Hub(s) => s.clone(),
            Origin::Other => self.path.display().to_string(),
        }
    }
}

/// Every GGUF model in `cache_dir`, then in the Hugging Face tools' cache `hub_cache`, each
/// sorted by path (a split model once, under its first file); `known` names the files known
/// models pull.
pub fn list(
    cache_dir: &Path,
    hub_cache: Option<&Path>,
    known: &[&'static KnownModel],
) -> io::Result<Vec<CachedModel>> {
    let mut files = Vec::new();
    collect(cache_dir, &mut files)?;
    let mut out: Vec<CachedModel> = grouped(files)
        .into_iter()
        .map(|(path, parts)| {
            let origin = origin(cache_dir, &path, known);
            describe(path, parts, origin)
        })
        .collect();
    if let Some(hub) = hub_cache {
        for (snapshot, spec) in hub_snapshots(hub)? {
            let mut files = Vec::new();
            collect(&snapshot, &mut files)?;
            for (path, parts) in grouped(files) {
                let Ok(rel) = path.strip_prefix(&snapshot) else {
                    continue;
                };
                let file = rel.to_string_lossy().replace('\\', "/");
                let at = match spec.revision.as_str() {
                    "main" => String::new(),
                    r => format!("@{r}"),
                };
                let origin = Origin::Hub(format!("{}/{file}{at}", spec.repo));
                out.push(describe(path, parts, origin));
            }
        }
    }
    Ok(out)
}

/// `files` sorted, a split model's parts under its first file.
fn grouped(mut files: Vec<PathBuf>) -> Vec<(PathBuf, Vec<PathBuf>)> {
    files.sort();
    fn split(p: &Path) -> Option<(&str, u32, u32)> {
        p.file_name().and_then(|n| n.to_str()).and_then(split_name)
    }
    files
        .iter()
        .filter(|p| split(p).is_none_or(|(_, part, _)| part == 1))
        .map(|path| {
            let parts = match split(path) {
                Some((prefix, _, count)) => (2..=count)
                    .map(|i| path.with_file_name(part_name(prefix, i, count)))
                    .filter(|p| files.contains(p))
                    .collect(),
                None => Vec::new(),
            };
            (path.clone(), parts)
        })
        .collect()
}

/// Each snapshot folder of the tools' cache with the `hf:OWNER/REPO` its files are named under
/// and its revision: `main` or another ref pointing at it, else its commit.
fn hub_snapshots(hub: &Path) -> io::Result<Vec<(PathBuf, HubName)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(hub) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((owner, repo)) = name
            .strip_prefix("models--")
            .and_then(|r| r.split_once("--"))
        else {
            continue;
        };
        let refs = refs_of(&e.path().join("refs"));
        for snap in std::fs::read_dir(e.path().join("snapshots"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let commit = snap.file_name().to_string_lossy().into_owned();
            let mut names: Vec<&String> = refs
                .iter()
                .filter(|(_, c)| *c == commit)
                .map(|(r, _)| r)
                .collect();
            names.sort_by_key(|r| (r.as_str() != "main", r.as_str().to_string()));
            let revision = names.first().map_or(commit.clone(), |r| (*r).clone());
            out.push((
                snap.path(),
                HubName {
                    repo: format!("hf:{owner}/{repo}"),
                    revision,
                },
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// `hf:OWNER/REPO` and a revision (a file is `hf:OWNER/REPO/FILE[@REV]`, no `@` for `main`).
struct HubName {
    repo: String,
    revision: String,
}

/// `(ref name, commit)` of every ref under `dir` (`refs/main`, `refs/pr/1`).
fn refs_of(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let (Ok(rel), Ok(c)) = (p.strip_prefix(dir), std::fs::read_to_string(&p)) {
                out.push((
                    rel.to_string_lossy().replace('\\', "/"),
                    c.trim().to_string(),
                ));
            }
        }
    }
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        let path = e.path();
        if e.file_type()?.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "gguf") {
            out.push(path);
        }
    }
    Ok(())
}

fn describe(path: PathBuf, parts: Vec<PathBuf>, origin: Origin) -> CachedModel {
    let bytes = std::iter::once(&path)
        .chain(&parts)
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let (architecture, dtype) = match GgufFile::open(&path) {
        Ok(f) => (
            f.architecture()
                .map(str::to_string)
                .map_err(|e| e.to_string()),
            main_dtype(&f),
        ),
        Err(e) => (Err(e.to_string()), None),
    };
    CachedModel {
        path,
        parts,
        bytes,
        origin,
        architecture,
        dtype,
    }
}

fn origin(cache_dir: &Path, path: &Path, known: &[&'static KnownModel]) -> Origin {
    let Ok(rel) = path.strip_prefix(cache_dir) else {
        return Origin::Other;
    };
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let [hf, owner, repo, revision, file @ ..] = &parts[..] {
        if hf == "hf" && !file.is_empty() {
            let rev = revision.replace("%2F", "/");
            let at = match rev.as_str() {
                "main" => String::new(),
                r => format!("@{r}"),
            };
            return Origin::Hub(format!("hf:{owner}/{repo}/{}{at}", file.join("/")));
        }
    }
    match known.iter().find(|m| gguf_of(m) == Some(rel)) {
        Some(m) => Origin::Known(m.name),
        None => Origin::Other,
    }
}

/// The GGUF a known model is used as, relative to the cache.
fn gguf_of(m: &KnownModel) -> Option<&Path> {
    let file = m.convert.map_or(m.file, |(gguf, _)| gguf);
    file.ends_with(".gguf").then(|| Path::new(file))
}

fn main_dtype(f: &GgufFile) -> Option<DType> {
    let mut by: Vec<(DType, u64)> = Vec::new();
    for t in f.tensors() {
        match by.iter_mut().find(|(d, _)| *d == t.dtype()) {
            Some((_, n)) => *n += t.size(),
            None => by.push((t.dtype(), t.size())),
        }
    }
    by.into_iter().max_by_key(|&(_, n)| n).map(|(d, _)| d)
}

/// Why a model could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("no cached model '{0}' (see `wgllm list`)")]
    NotCached(String),
    #[error("{} is not in the model cache ({}); `wgllm rm` removes only cached models", .0.display(), .1.display())]
    OutsideCache(PathBuf, PathBuf),
    #[error("{} is in use by a running wgllm (a server, chat or run holds it); stop it first", .0.display())]
    InUse(PathBuf),
    #[error("cannot remove {}: {}", .0.display(), .1)]
    Io(PathBuf, io::Error),
}

/// Removes the cached model `name` (a known name, an `hf:` spec or a path `wgllm list` printed)
/// with what was downloaded to make it (a known model's checkpoint zip and its unpacked
/// folder; in the Hugging Face tools' cache, the blobs no other snapshot links to, and the
/// snapshot and its refs once empty); returns the paths removed and their bytes. A file some process holds open as a
/// model ([`wgllm_gguf::in_use`]) is refused.
pub fn remove(
    cache_dir: &Path,
    hub_cache: Option<&Path>,
    name: &str,
    known: &[&'static KnownModel],
) -> Result<Vec<(PathBuf, u64)>, RemoveError> {
    let models =
        list(cache_dir, hub_cache, known).map_err(|e| RemoveError::Io(cache_dir.into(), e))?;
    let p = Path::new(name);
    // A bare file name names the one cached file of that name.
    let by_file: Vec<&CachedModel> = models
        .iter()
        .filter(|m| m.path.file_name() == Some(p.as_os_str()))
        .collect();
    let found = models
        .iter()
        .find(|m| m.name() == name || same_file(&m.path, p))
        .or(match by_file[..] {
            [one] => Some(one),
            _ => None,
        });
    let Some(m) = found else {
        return Err(match p.is_file() {
            true => RemoveError::OutsideCache(p.into(), cache_dir.into()),
            false => RemoveError::NotCached(name.into()),
        });
    };
    if wgllm_gguf::in_use(&m.path).map_err(|e| RemoveError::Io(m.path.clone(), e))? {
        return Err(RemoveError::InUse(m.path.clone()));
    }
    let mut gone = Vec::new();
    let mut rm = |p: PathBuf| -> Result<(), RemoveError> {
        let bytes = size_of(&p);
        let r = match p.is_dir() {
            true => std::fs::remove_dir_all(&p),
            false => std::fs::remove_file(&p),
        };
        match r {
            Ok(()) => {
                gone.push((p, bytes));
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RemoveError::Io(p, e)),
        }
    };
    let files: Vec<&PathBuf> = std::iter::once(&m.path).chain(&m.parts).collect();
    let in_hub = hub_cache.filter(|h| m.path.starts_with(h));
    // The blobs behind the tools' snapshot links, found before the links go.
    let blobs: Vec<PathBuf> = match in_hub {
        Some(_) => files.iter().filter_map(|p| p.canonicalize().ok()).collect(),
        None => Vec::new(),
    };
    for p in &files {
        rm((*p).clone())?;
        // The sha256 an `hf:` download keeps beside the file.
        rm(crate::hf::sha_path(p))?;
    }
    if let Some(hub) = in_hub {
        tidy_hub(hub, &m.path, &blobs).map_err(|e| RemoveError::Io(m.path.clone(), e))?;
    }
    if let Origin::Known(n) = m.origin {
        if let Some(k) = known.iter().find(|k| k.name == n && k.convert.is_some()) {
            rm(cache_dir.join(k.file))?;
            rm(checkpoint_dir(k, cache_dir))?;
        }
    }
    Ok(gone)
}

/// After a snapshot entry `link` of the tools' cache `hub` went: its `blobs` that no other entry
/// of the repository links to, the folders it leaves empty, and the refs of a snapshot gone.
fn tidy_hub(hub: &Path, link: &Path, blobs: &[PathBuf]) -> io::Result<()> {
    let Ok(rel) = link.strip_prefix(hub) else {
        return Ok(());
    };
    let mut it = rel.components();
    let (Some(repo), Some(_), Some(commit)) = (it.next(), it.next(), it.next()) else {
        return Ok(());
    };
    let repo = hub.join(repo);
    let snapshot = repo.join("snapshots").join(commit);
    let mut linked = Vec::new();
    collect(&repo.join("snapshots"), &mut linked)?;
    let still: Vec<PathBuf> = linked
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    for b in blobs {
        if !still.contains(b) {
            std::fs::remove_file(b)?;
        }
    }
    // Empty folders from the entry's up to the snapshot.
    let mut dir = link.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(&snapshot)) {
        if std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    if !snapshot.exists() {
        let commit = commit.as_os_str().to_string_lossy();
        for (name, c) in refs_of(&repo.join("refs")) {
            if c == commit {
                std::fs::remove_file(repo.join("refs").join(name))?;
            }
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Bytes of a file, or of every file under a folder.
fn size_of(p: &Path) -> u64 {
    match std::fs::read_dir(p) {
        Ok(entries) => entries.flatten().map(|e| size_of(&e.path())).sum(),
        Err(_) => std::fs::metadata(p).map_or(0, |m| m.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pull::KNOWN_MODELS;
    use crate::synth::{llama_gguf, LlamaShape};

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wgllm-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, dtype: DType) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, llama_gguf(&LlamaShape::TINY, dtype, 1).unwrap()).unwrap();
    }

    fn known() -> Vec<&'static KnownModel> {
        KNOWN_MODELS.iter().collect()
    }

    #[test]
    fn lists_known_hub_and_other_files_with_their_headers() {
        let d = scratch("list");
        let smol = KNOWN_MODELS[0].file;
        write(&d.join(smol), DType::Q8_0);
        write(&d.join("hf/owner/repo/main/sub/m-Q4_0.gguf"), DType::Q4_0);
        write(&d.join("hf/owner/repo/refs%2Fpr%2F1/m.gguf"), DType::F16);
        write(&d.join("mine.gguf"), DType::F32);
        std::fs::write(d.join("broken.gguf"), b"not gguf").unwrap();
        std::fs::write(d.join("notes.txt"), b"x").unwrap();
        let l = list(&d, None, &known()).unwrap();
        let names: Vec<String> = l.iter().map(CachedModel::name).collect();
        assert_eq!(l.len(), 5, "{names:?}");
        let by = |n: &str| {
            l.iter()
                .find(|m| m.name() == n)
                .unwrap_or_else(|| panic!("{n}"))
        };
        assert_eq!(by("smollm2").dtype, Some(DType::Q8_0));
        assert_eq!(by("smollm2").architecture.as_deref(), Ok("llama"));
        assert_eq!(by("hf:owner/repo/sub/m-Q4_0.gguf").dtype, Some(DType::Q4_0));
        assert_eq!(by("hf:owner/repo/m.gguf@refs/pr/1").dtype, Some(DType::F16));
        let mine = d.join("mine.gguf");
        assert_eq!(by(&mine.display().to_string()).origin, Origin::Other);
        let broken = by(&d.join("broken.gguf").display().to_string());
        assert!(broken.architecture.is_err() && broken.dtype.is_none());
        assert!(by("smollm2").bytes > 0);
        assert!(list(&d.join("absent"), None, &known()).unwrap().is_empty());
    }

    #[test]
    fn removes_by_name_spec_or_path_and_refuses_what_is_in_use_or_elsewhere() {
        let d = scratch("rm");
        write(&d.join(KNOWN_MODELS[0].file), DType::F32);
        let hub = d.join("hf/o/r/main/x.gguf");
        write(&hub, DType::F32);
        write(&d.join("mine.gguf"), DType::F32);
        let k = known();
        {
            let _held = GgufFile::open(&hub).unwrap();
            let e = remove(&d, None, "hf:o/r/x.gguf", &k).unwrap_err();
            assert!(matches!(e, RemoveError::InUse(_)), "{e}");
            assert!(hub.exists());
        }
        let gone = remove(&d, None, "hf:o/r/x.gguf", &k).unwrap();
        assert_eq!(gone.len(), 1);
        assert!(!hub.exists());
        remove(&d, None, "smollm2", &k).unwrap();
        assert!(!d.join(KNOWN_MODELS[0].file).exists());
        remove(&d, None, &d.join("mine.gguf").display().to_string(), &k).unwrap();
        assert!(list(&d, None, &k).unwrap().is_empty());
        let e = remove(&d, None, "smollm2", &k).unwrap_err();
        assert!(matches!(e, RemoveError::NotCached(_)), "{e}");
        let outside = scratch("rm-outside").join("y.gguf");
        write(&outside, DType::F32);
        let e = remove(&d, None, &outside.display().to_string(), &k).unwrap_err();
        assert!(matches!(e, RemoveError::OutsideCache(..)), "{e}");
        assert!(outside.exists());
    }

    /// `bytes` (a GGUF) written as the two files of a split model `NAME-0000i-of-00002.gguf` in
    /// `dir`; their paths.
    fn write_split(dir: &Path, name: &str, bytes: Vec<u8>) -> [PathBuf; 2] {
        let f = GgufFile::from_bytes(bytes.into()).unwrap();
        let writers = wgllm_gguf::split::split_writers(&f, 2).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let paths = [1, 2].map(|i| dir.join(part_name(name, i, 2)));
        for (w, p) in writers.iter().zip(&paths) {
            std::fs::write(p, w.to_vec()).unwrap();
        }
        paths
    }

    #[test]
    fn the_hugging_face_tools_cache_is_listed_and_removed_from() {
        use crate::hf::{hub_target, HfSpec};
        let d = scratch("hub");
        let hub = d.join("hub");
        let bytes = llama_gguf(&LlamaShape::TINY, DType::Q8_0, 1).unwrap();
        let spec = HfSpec::parse("hf:o/r/sub/m.gguf").unwrap();
        let t = hub_target(&hub, &spec, "c0ffee", &"ab".repeat(32));
        std::fs::create_dir_all(t.blob.parent().unwrap()).unwrap();
        std::fs::write(&t.blob, &bytes).unwrap();
        t.publish().unwrap();
        // The same blob at a second revision, a tag.
        let tagged = HfSpec::parse("hf:o/r/sub/m.gguf@v1").unwrap();
        let t2 = hub_target(&hub, &tagged, "beef", &"ab".repeat(32));
        t2.publish().unwrap();
        let k = known();
        let l = list(&d.join("ours"), Some(&hub), &k).unwrap();
        let names: Vec<String> = l.iter().map(CachedModel::name).collect();
        assert_eq!(names, ["hf:o/r/sub/m.gguf@v1", "hf:o/r/sub/m.gguf"]);
        assert_eq!(l[1].bytes, bytes.len() as u64);
        assert_eq!(l[1].dtype, Some(DType::Q8_0));
        // Removing main keeps the blob the tag still links to, and drops main's ref.
        remove(&d.join("ours"), Some(&hub), "hf:o/r/sub/m.gguf", &k).unwrap();
        assert!(!t.link.exists() && t.blob.exists());
        assert!(!t.reference.as_ref().unwrap().exists());
        assert!(!t.link.parent().unwrap().exists());
        remove(&d.join("ours"), Some(&hub), "hf:o/r/sub/m.gguf@v1", &k).unwrap();
        assert!(!t.blob.exists() && !t2.link.exists());
        assert!(list(&d.join("ours"), Some(&hub), &k).unwrap().is_empty());
    }

    #[test]
    fn a_split_model_is_listed_once_and_removed_whole() {
        let d = scratch("split");
        let bytes = llama_gguf(&LlamaShape::TINY, DType::Q8_0, 1).unwrap();
        let [p1, p2] = write_split(&d.join("hf/o/r/main"), "m-Q8_0", bytes);
        let k = known();
        let l = list(&d, None, &k).unwrap();
        assert_eq!(l.len(), 1, "{l:?}");
        let m = &l[0];
        assert_eq!(m.name(), "hf:o/r/m-Q8_0-00001-of-00002.gguf");
        assert_eq!(m.parts, vec![p2.clone()]);
        assert_eq!(m.architecture.as_deref(), Ok("llama"));
        assert_eq!(m.dtype, Some(DType::Q8_0));
        let both = std::fs::metadata(&p1).unwrap().len() + std::fs::metadata(&p2).unwrap().len();
        assert_eq!(m.bytes, both);
        {
            let _held = GgufFile::open(&p1).unwrap();
            let e = remove(&d, None, &m.name(), &k).unwrap_err();
            assert!(matches!(e, RemoveError::InUse(_)), "{e}");
        }
        let gone = remove(&d, None, &m.name(), &k).unwrap();
        assert_eq!(gone.len(), 2);
        assert!(!p1.exists() && !p2.exists());
    }
}
