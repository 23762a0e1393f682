//! Models split over several files, as llama.cpp's `gguf-split` writes them:
//! `NAME-00001-of-0000N.gguf` … `NAME-0000N-of-0000N.gguf`. The first holds the model's metadata;
//! every part holds `split.no` (from 0) and `split.count`, and some of the tensors, in its own
//! data section; the first holds `split.tensors.count`, the tensors of all parts.

use std::path::{Path, PathBuf};

use crate::error::GgufError;
use crate::file::GgufFile;
use crate::value::Value;
use crate::writer::GgufWriter;

/// The part number (from 0) a file of a split model holds.
pub const SPLIT_NO: &str = "split.no";
/// How many files the model is split over.
pub const SPLIT_COUNT: &str = "split.count";
/// The tensors of all parts together.
pub const SPLIT_TENSORS: &str = "split.tensors.count";

/// `(prefix, part, count)` of a split file's name `PREFIX-00002-of-00005.gguf` (parts from 1).
pub fn split_name(file_name: &str) -> Option<(&str, u32, u32)> {
    let rest = file_name.strip_suffix(".gguf")?;
    let (rest, count) = rest.rsplit_once("-of-")?;
    let (prefix, part) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(part) || !digits(count) {
        return None;
    }
    let (part, count) = (part.parse().ok()?, count.parse().ok()?);
    (part >= 1 && part <= count).then_some((prefix, part, count))
}

/// The file name of part `part` (from 1) of `count` of the model named `prefix`.
pub fn part_name(prefix: &str, part: u32, count: u32) -> String {
    format!("{prefix}-{part:05}-of-{count:05}.gguf")
}

impl GgufFile {
    /// Maps the file at `path` into memory and parses it (not in the browser, which has no files:
    /// use [`GgufFile::from_bytes`]).
    ///
    /// The mapping is shared by every `Bytes` handed out by [`GgufFile::tensor_bytes`] and lives
    /// until the last of them is dropped.
    ///
    /// A model split over several files (`NAME-00001-of-0000N.gguf`, as llama.cpp's
    /// `gguf-split` writes them) opens from its first file: the others are found beside it and
    /// their tensors join its own.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let first = GgufFile::open_one(path)?;
        join(path, first, GgufFile::open_one)
    }
}

/// `first`, opened from `path`, with the tensors of its other parts when it is the first file of
/// a split model (each opened by `open`); a file that is not split as it is.
#[cfg(not(target_arch = "wasm32"))]
fn join(
    path: &Path,
    mut first: GgufFile,
    open: impl Fn(&Path) -> Result<GgufFile, GgufError>,
) -> Result<GgufFile, GgufError> {
    let err = |why: String| GgufError::Split {
        path: path.to_owned(),
        why,
    };
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let named = split_name(file_name);
    let count = match first.get(SPLIT_COUNT) {
        Some(_) => first.get_u32(SPLIT_COUNT)?,
        None => match named {
            Some((_, _, n)) if n > 1 => {
                return Err(err(format!(
                    "the name says {n} parts, the file has no {SPLIT_COUNT}"
                )))
            }
            _ => return Ok(first),
        },
    };
    let no = match first.get(SPLIT_NO) {
        Some(_) => first.get_u32(SPLIT_NO)?,
        None => 0,
    };
    if count <= 1 {
        return Ok(first);
    }
    let Some((prefix, _, _)) = named else {
        return Err(err(format!(
            "{SPLIT_COUNT} is {count}, but the name does not say which part this is (NAME-{:05}-of-{count:05}.gguf)",
            no + 1
        )));
    };
    if no != 0 {
        return Err(err(format!(
            "this is part {} of {count}: open the first, {}",
            no + 1,
            part_name(prefix, 1, count)
        )));
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    for part in 2..=count {
        let p: PathBuf = dir.join(part_name(prefix, part, count));
        if !p.exists() {
            return Err(err(format!(
                "part {part} of {count}, {}, is missing",
                p.display()
            )));
        }
        let f = open(&p).map_err(|e| err(format!("part {part} of {count}: {e}")))?;
        let (f_no, f_count) = (f.get_u32(SPLIT_NO).ok(), f.get_u32(SPLIT_COUNT).ok());
        if (f_no, f_count) != (Some(part - 1), Some(count)) {
            return Err(err(format!(
                "{} says it is part {} of {}, not part {part} of {count}",
                p.display(),
                f_no.map_or("?".into(), |n| (n + 1).to_string()),
                f_count.map_or("?".into(), |n| n.to_string())
            )));
        }
        first
            .add_part(f)
            .map_err(|why| err(format!("part {part} of {count}: {why}")))?;
    }
    if first.get(SPLIT_TENSORS).is_some() {
        let want = first.get_u64(SPLIT_TENSORS)?;
        let got = first.tensors().len() as u64;
        if got != want {
            return Err(err(format!(
                "{SPLIT_TENSORS} is {want}, the {count} parts hold {got}"
            )));
        }
    }
    Ok(first)
}

/// `file` cut into `parts` files of about equal bytes, its tensors in order (each part at least
/// one): the writers of `NAME-00001-of-…` onwards, as `gguf-split` writes them (the metadata in
/// the first, the split keys in each).
pub fn split_writers(file: &GgufFile, parts: u32) -> Result<Vec<GgufWriter>, GgufError> {
    let n = file.tensors().len();
    if parts == 0 || parts as usize > n || parts > 99_999 {
        return Err(GgufError::InvalidWrite {
            what: format!(
                "{parts} parts of a file of {n} tensors: each part needs a tensor (and at most 99,999 parts)"
            ),
        });
    }
    if file.split_count() > 1 {
        return Err(GgufError::InvalidWrite {
            what: "the file is split already".into(),
        });
    }
    let total: u64 = file.tensors().iter().map(|t| t.size()).sum();
    let split_keys = |no: u32| {
        [
            (SPLIT_NO.to_string(), Value::U16(no as u16)),
            (SPLIT_COUNT.to_string(), Value::U16(parts as u16)),
        ]
    };
    let mut writers = Vec::with_capacity(parts as usize);
    let mut first = GgufWriter::new();
    let kept = file
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .map(|(k, v)| (k.clone(), v.clone()));
    for (k, v) in kept.chain(split_keys(0)) {
        first.add_metadata(k, v)?;
    }
    first.add_metadata(SPLIT_TENSORS, Value::I32(n as i32))?;
    writers.push(first);
    let (mut part, mut done) = (0u32, 0u64);
    for (i, t) in file.tensors().iter().enumerate() {
        // The next part starts once this one has its share of the bytes, leaving a tensor for
        // each part still to come.
        let share = total * u64::from(part + 1) / u64::from(parts);
        let left = n - i;
        if part + 1 < parts && (done >= share || left == (parts - part - 1) as usize) && i > 0 {
            part += 1;
            let mut w = GgufWriter::new();
            for (k, v) in split_keys(part) {
                w.add_metadata(k, v)?;
            }
            writers.push(w);
        }
        let w = writers.last_mut().expect("the first part exists");
        w.add_tensor(t.name(), t.dtype(), t.shape(), file.tensor_bytes(t)?)?;
        done += t.size();
    }
    Ok(writers)
}
