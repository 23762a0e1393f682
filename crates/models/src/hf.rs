//! Models named `hf:OWNER/REPO/FILE.gguf[@REVISION]`: fetched over HTTP(S) from a Hugging Face
//! endpoint ([`HubConfig`]) at `{endpoint}/{owner}/{repo}/resolve/{revision}/{file}`, into
//! `<cache>/hf/<owner>/<repo>/<revision>/<file>`.
//!
//! The download streams into `<file>.part` (locked, so two processes never write one file),
//! resumes a `.part` left by an interrupted run with a `Range` request, and is renamed into place
//! only once it is whole: it must start with the GGUF magic, have the size the server announced,
//! and — where the Hub names one (`X-Linked-Etag`/`ETag` of LFS files is their sha256) — match the
//! sha256. A file already in the cache is used without touching the network.
//!
//! Like the Hub's own client, the first request is a `HEAD` that does not follow the redirect to
//! the content store, so the metadata of the Hub itself (sha256, size) is seen; the token is sent
//! to the endpoint's host only, never to the host it redirects to.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};

use crate::config::HubConfig;
use crate::hub_cache::Target;

/// What a model argument starts with to name a file on the Hub.
pub const PREFIX: &str = "hf:";
/// The revision used when the spec names none.
pub const DEFAULT_REVISION: &str = "main";
const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// Relative redirects followed while looking for the file's metadata (renamed repositories).
const MAX_HOPS: usize = 5;

/// Why an `hf:` model could not be had.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    #[error("malformed model spec '{spec}': {why} (expected hf:OWNER/REPO/FILE.gguf or hf:OWNER/REPO:QUANT, optionally followed by @REVISION)")]
    BadSpec { spec: String, why: String },
    #[error("{spec}: {why}")]
    Pick { spec: String, why: String },
    #[error("Hugging Face endpoint '{0}' is not an http:// or https:// URL")]
    BadEndpoint(String),
    #[error("{repo} needs a Hugging Face access token (HTTP {status} from {host}): the repository is gated or private; request access on its page, then set HF_TOKEN")]
    TokenNeeded {
        repo: String,
        status: u16,
        host: String,
    },
    #[error("{host} refused the token in HF_TOKEN for {repo} (HTTP {status}): the token may lack read access, or the repository's terms are not accepted yet")]
    TokenRefused {
        repo: String,
        status: u16,
        host: String,
    },
    #[error("{what} (HTTP {status} from {host})")]
    NotFound {
        what: String,
        status: u16,
        host: String,
    },
    #[error("HTTP {status} from {host} for {path}")]
    Status {
        status: u16,
        host: String,
        path: String,
    },
    #[error("cannot reach {host}: {reason}")]
    Unreachable { host: String, reason: String },
    #[error("{0} is not in the cache, and HF_HUB_OFFLINE forbids downloading it")]
    Offline(String),
    #[error("the download from {host} broke off at byte {at} ({reason}); run again to resume")]
    Interrupted {
        host: String,
        at: u64,
        reason: String,
    },
    #[error("disk full writing {0}; free some space and run again (the partial download is kept and resumes)")]
    DiskFull(String),
    #[error("{0}: {1}")]
    Io(String, io::Error),
    #[error("another wgllm is downloading {0} right now; wait for it to finish")]
    Busy(String),
    #[error("{spec} is not a GGUF file: it starts with {head:?}, not the GGUF magic")]
    NotGguf { spec: String, head: String },
    #[error("{spec}: received {got} bytes where the server announced {want}")]
    Size { spec: String, got: u64, want: u64 },
    #[error("{spec}: sha256 {got} differs from the {want} the server announced; the download was deleted")]
    Checksum {
        spec: String,
        got: String,
        want: String,
    },
}

/// A parsed `hf:OWNER/REPO/FILE.gguf[@REVISION]`. `file` may name a folder inside the repository
/// (`Q4_K_M/model.gguf`); `revision` is a branch, tag or commit (`refs/pr/1` too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfSpec {
    pub owner: String,
    pub repo: String,
    pub file: String,
    pub revision: String,
}

impl HfSpec {
    /// The other files of the split model whose first file this names (`NAME-00001-of-0000N.gguf`:
    /// parts 2 to N beside it), else none.
    pub fn split_parts(&self) -> Vec<HfSpec> {
        let (dir, name) = match self.file.rsplit_once('/') {
            Some((d, n)) => (format!("{d}/"), n),
            None => (String::new(), self.file.as_str()),
        };
        match wgllm_gguf::split::split_name(name) {
            Some((prefix, 1, count)) => (2..=count)
                .map(|part| HfSpec {
                    file: format!("{dir}{}", wgllm_gguf::split::part_name(prefix, part, count)),
                    ..self.clone()
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl std::fmt::Display for HfSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PREFIX}{}/{}/{}@{}",
            self.owner, self.repo, self.file, self.revision
        )
    }
}

/// True for names of repositories and their owners: letters, digits, `.`, `_`, `-`.
fn is_repo_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// True when no `/`-separated segment of `s` is empty, `.` or `..`.
fn clean_segments(s: &str) -> bool {
    s.split('/')
        .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

impl HfSpec {
    /// True when `s` is meant as an `hf:` spec (whether well-formed or not).
    pub fn is_hf(s: &str) -> bool {
        s.starts_with(PREFIX)
    }

    /// Parses `hf:OWNER/REPO/FILE.gguf` or `hf:OWNER/REPO/FILE.gguf@REVISION`.
    pub fn parse(spec: &str) -> Result<HfSpec, HfError> {
        let bad = |why: &str| HfError::BadSpec {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let rest = spec
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad("it does not start with 'hf:'"))?;
        let (path, revision) = rest.rsplit_once('@').unwrap_or((rest, DEFAULT_REVISION));
        let mut parts = path.splitn(3, '/');
        let (Some(owner), Some(repo), Some(file)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("it names no file inside the repository"));
        };
        if !is_repo_name(owner) || !is_repo_name(repo) {
            return Err(bad(
                "OWNER and REPO are made of letters, digits, '.', '_' and '-'",
            ));
        }
        if !clean_segments(file) || file.chars().any(|c| c.is_control() || c == '\\') {
            return Err(bad(
                "the file path has an empty, '.' or '..' part, or a control character or backslash",
            ));
        }
        if !file.to_ascii_lowercase().ends_with(".gguf") {
            return Err(bad("the file is not a .gguf file"));
        }
        if revision.is_empty()
            || !clean_segments(revision)
            || !revision
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
        {
            return Err(bad("the revision after '@' must be a branch, tag or commit (letters, digits, '.', '_', '-', '/')"));
        }
        Ok(HfSpec {
            owner: owner.into(),
            repo: repo.into(),
            file: file.into(),
            revision: revision.into(),
        })
    }

    /// `OWNER/REPO`.
    pub fn repo_id(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }

    /// The revision as one path segment (`refs/pr/1` → `refs%2Fpr%2F1`), as the Hub's URLs and
    /// this cache write it.
    fn revision_segment(&self) -> String {
        self.revision.replace('/', "%2F")
    }

    /// `{endpoint}/{owner}/{repo}/resolve/{revision}/{file}`.
    pub fn url(&self, endpoint: &str) -> String {
        format!(
            "{}/{}/{}/resolve/{}/{}",
            endpoint.trim_end_matches('/'),
            self.owner,
            self.repo,
            self.revision_segment(),
            percent_encode_path(&self.file)
        )
    }

    /// Where the file lives once downloaded: `<cache_dir>/hf/<owner>/<repo>/<revision>/<file>`.
    pub fn cache_path(&self, cache_dir: &Path) -> PathBuf {
        let mut p = cache_dir
            .join("hf")
            .join(&self.owner)
            .join(&self.repo)
            .join(self.revision_segment());
        p.extend(self.file.split('/'));
        p
    }

    /// The cached file, if a complete download of it is there.
    pub fn cached(&self, cache_dir: &Path) -> Option<PathBuf> {
        Some(self.cache_path(cache_dir)).filter(|p| p.is_file())
    }

    /// The snapshot folder of this revision in the Hugging Face tools' cache at `hub_cache`:
    /// `models--OWNER--REPO/snapshots/COMMIT`, the commit being the revision itself or what
    /// `refs/REVISION` holds; `None` when they have none.
    pub fn hub_snapshot(&self, hub_cache: &Path) -> Option<PathBuf> {
        let repo = hub_cache.join(format!("models--{}--{}", self.owner, self.repo));
        let is_commit =
            self.revision.len() == 40 && self.revision.bytes().all(|b| b.is_ascii_hexdigit());
        let commit = match is_commit {
            true => self.revision.clone(),
            false => {
                let mut r = repo.join("refs");
                r.extend(self.revision.split('/'));
                std::fs::read_to_string(r).ok()?.trim().to_string()
            }
        };
        if commit.is_empty() || !commit.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        Some(repo.join("snapshots").join(commit)).filter(|p| p.is_dir())
    }

    /// The file in the Hugging Face tools' cache, if they downloaded it ([`HfSpec::hub_snapshot`]).
    pub fn hub_cached(&self, hub_cache: &Path) -> Option<PathBuf> {
        let mut p = self.hub_snapshot(hub_cache)?;
        p.extend(self.file.split('/'));
        // A snapshot entry is a link into blobs/; `is_file` follows it.
        p.is_file().then_some(p)
    }
}

/// Percent-encodes every byte of a URL path but the unreserved ones and `/`.
fn percent_encode_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `scheme://host[:port]` of a URL and its host part, for messages and for deciding where the
/// token may go.
struct Origin {
    origin: String,
    host: String,
}

impl Origin {
    fn of(url: &str) -> Option<Origin> {
        let (scheme, rest) = url.split_once("://")?;
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        (!host.is_empty()).then(|| Origin {
            origin: format!("{scheme}://{host}"),
            host: host.to_string(),
        })
    }

    /// True when `url` is on this origin (the token may be sent with it).
    fn owns(&self, url: &str) -> bool {
        url.strip_prefix(&self.origin)
            .is_some_and(|r| r.is_empty() || r.starts_with(['/', '?']))
    }
}

fn host_of(url: &str) -> String {
    Origin::of(url).map_or_else(|| url.to_string(), |o| o.host)
}

/// The path of `url` without its query (which, on a content store, is a signature).
fn path_of(url: &str) -> String {
    let after = url.split_once("://").map_or(url, |(_, r)| r);
    let path = after.find('/').map_or("/", |i| &after[i..]);
    path.split(['?', '#']).next().unwrap_or("/").to_string()
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HfError + '_ {
    move |e| HfError::Io(path.display().to_string(), e)
}

/// A write error, named as a full disk when it is one.
fn write_err(path: &Path) -> impl FnOnce(io::Error) -> HfError + '_ {
    move |e| match e.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
            HfError::DiskFull(path.display().to_string())
        }
        _ => HfError::Io(path.display().to_string(), e),
    }
}

/// A request that got no HTTP answer.
fn net_error(url: &str, e: ureq::Error) -> HfError {
    let reason = match e {
        ureq::Error::HostNotFound => "host name not found (offline, or a wrong endpoint?)".into(),
        ureq::Error::Io(io) if io.kind() == io::ErrorKind::ConnectionRefused => {
            "connection refused".into()
        }
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    };
    HfError::Unreachable {
        host: host_of(url),
        reason,
    }
}

/// An HTTP answer that is neither success nor redirect, as the error a user can act on. The Hub
/// says what is missing in `X-Error-Code`.
fn status_error(
    status: u16,
    headers: &ureq::http::HeaderMap,
    spec: &HfSpec,
    hub: &HubConfig,
    url: &str,
) -> HfError {
    let host = host_of(url);
    let code = headers
        .get("x-error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let repo = spec.repo_id();
    match (status, code) {
        (401 | 404, "RepoNotFound") => HfError::NotFound {
            what: if hub.token.is_some() {
                format!("repository {repo} not found")
            } else {
                format!("repository {repo} not found (if it is private, set HF_TOKEN)")
            },
            status,
            host,
        },
        (404, "RevisionNotFound") => HfError::NotFound {
            what: format!("{repo} has no revision '{}'", spec.revision),
            status,
            host,
        },
        (404, _) if spec.file.is_empty() => HfError::NotFound {
            what: format!("{repo} at revision '{}' not found", spec.revision),
            status,
            host,
        },
        (404, _) => HfError::NotFound {
            what: format!(
                "{repo} has no file '{}' at revision '{}'",
                spec.file, spec.revision
            ),
            status,
            host,
        },
        (401 | 403, _) if hub.token.is_none() => HfError::TokenNeeded { repo, status, host },
        (401 | 403, _) => HfError::TokenRefused { repo, status, host },
        _ => HfError::Status {
            status,
            host,
            path: path_of(url),
        },
    }
}

/// The sha256 in an `ETag`-style header value (`"…"`, `W/"…"`), if it is one (64 hex digits; the
/// ETag of a file kept in git rather than LFS is its 40-digit git hash).
fn etag_sha256(value: &str) -> Option<String> {
    let v = value.trim();
    let v = v.strip_prefix("W/").unwrap_or(v).trim_matches('"');
    (v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit())).then(|| v.to_ascii_lowercase())
}

fn header<'a>(h: &'a ureq::http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// What the Hub says about the file before the download.
struct Remote {
    /// Where the bytes are (the content store the Hub redirects to, or the Hub itself).
    url: String,
    size: Option<u64>,
    sha256: Option<String>,
    /// The commit the revision is at (`X-Repo-Commit`), when the Hub says.
    commit: Option<String>,
}

/// The paths of every file in a repository at `revision`, from the Hub's tree API
/// (`/api/models/OWNER/REPO/tree/REVISION?recursive=true`, its first page: a thousand entries).
pub fn list_files(
    owner: &str,
    repo: &str,
    revision: &str,
    hub: &HubConfig,
) -> Result<Vec<String>, HfError> {
    let url = format!(
        "{}/api/models/{owner}/{repo}/tree/{}?recursive=true",
        hub.endpoint.trim_end_matches('/'),
        revision.replace('/', "%2F")
    );
    let mut req = crate::net::agent().get(&url);
    if let Some(token) = &hub.token {
        req = req.header("Authorization", format!("Bearer {token}"));
    }
    let mut resp = req.call().map_err(|e| net_error(&url, e))?;
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        let spec = HfSpec {
            owner: owner.into(),
            repo: repo.into(),
            file: String::new(),
            revision: revision.into(),
        };
        return Err(status_error(status, resp.headers(), &spec, hub, &url));
    }
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .map_err(|e| net_error(&url, e))?;
    let entries: Vec<serde_json::Value> =
        serde_json::from_str(&body).map_err(|e| HfError::Pick {
            spec: format!("{PREFIX}{owner}/{repo}"),
            why: format!("the Hub's file list did not parse: {e}"),
        })?;
    Ok(entries
        .iter()
        .filter(|e| e["type"] == "file")
        .filter_map(|e| e["path"].as_str().map(str::to_string))
        .collect())
}

/// `HEAD` on the resolve URL without following the redirect to the content store (relative
/// redirects, as for renamed repositories, are followed).
fn probe(
    agent: &ureq::Agent,
    spec: &HfSpec,
    hub: &HubConfig,
    origin: &Origin,
) -> Result<Remote, HfError> {
    let mut url = spec.url(&hub.endpoint);
    let (mut size, mut sha256, mut commit) = (None, None, None);
    for _ in 0..MAX_HOPS {
        let mut req = agent.head(&url).config().max_redirects(0).build();
        if let (Some(token), true) = (&hub.token, origin.owns(&url)) {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let resp = req.call().map_err(|e| net_error(&url, e))?;
        let h = resp.headers();
        sha256 = sha256
            .or_else(|| header(h, "x-linked-etag").and_then(etag_sha256))
            .or_else(|| header(h, "etag").and_then(etag_sha256));
        size = size.or_else(|| header(h, "x-linked-size").and_then(|v| v.parse().ok()));
        commit = commit.or_else(|| {
            header(h, "x-repo-commit")
                .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_alphanumeric()))
                .map(str::to_string)
        });
        let status = resp.status().as_u16();
        match status {
            200..=299 => {
                size = size.or_else(|| header(h, "content-length").and_then(|v| v.parse().ok()));
                return Ok(Remote {
                    url,
                    size,
                    sha256,
                    commit,
                });
            }
            300..=399 => match header(h, "location") {
                Some(loc) if loc.starts_with('/') => url = format!("{}{loc}", origin.origin),
                Some(loc) if Origin::of(loc).is_some() => {
                    return Ok(Remote {
                        url: loc.to_string(),
                        size,
                        sha256,
                        commit,
                    })
                }
                _ => {
                    return Err(HfError::Status {
                        status,
                        host: host_of(&url),
                        path: path_of(&url),
                    })
                }
            },
            _ => return Err(status_error(status, h, spec, hub, &url)),
        }
    }
    Err(HfError::Status {
        status: 310,
        host: host_of(&url),
        path: format!("{} (more than {MAX_HOPS} redirects)", path_of(&url)),
    })
}

/// The bytes of the `.part` file so far: its length, first bytes, and sha256 state.
struct Partial {
    len: u64,
    head: Vec<u8>,
    hasher: Sha256,
}

impl Partial {
    fn empty() -> Partial {
        Partial {
            len: 0,
            head: Vec::with_capacity(4),
            hasher: Sha256::new(),
        }
    }

    /// Reads what an earlier run left in `f`.
    fn read(f: &mut File, path: &Path) -> Result<Partial, HfError> {
        let mut p = Partial::empty();
        f.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).map_err(io_err(path))?;
            if n == 0 {
                return Ok(p);
            }
            p.push(&buf[..n]);
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let need = 4 - self.head.len().min(4);
        self.head.extend_from_slice(&bytes[..need.min(bytes.len())]);
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// False once the first four bytes are known and are not the GGUF magic.
    fn may_be_gguf(&self) -> bool {
        self.head.len() < 4 || self.head == GGUF_MAGIC
    }

    fn not_gguf(&self, spec: &HfSpec) -> HfError {
        HfError::NotGguf {
            spec: spec.to_string(),
            head: String::from_utf8_lossy(&self.head).into_owned(),
        }
    }
}

/// The total size in a `Content-Range: bytes a-b/total` whose range starts at `start`.
fn content_range_total(value: Option<&str>, start: u64) -> Option<Option<u64>> {
    let (range, total) = value?.strip_prefix("bytes ")?.split_once('/')?;
    let (a, _) = range.split_once('-')?;
    (a.trim().parse::<u64>().ok()? == start).then(|| total.trim().parse().ok())
}

/// What [`fetch`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The model file in the cache.
    pub path: PathBuf,
    /// True when the cache already held it (at most a `HEAD` was made, to see it unchanged).
    pub from_cache: bool,
    /// Bytes of an earlier partial download that this one continued from (0: from the start).
    pub resumed_at: u64,
    /// Size of the file.
    pub len: u64,
    /// The sha256 the server announced and the file was checked against (None: the server named
    /// none, and only the size and the GGUF magic were checked).
    pub sha256: Option<String>,
}

impl Fetched {
    fn cached(path: PathBuf) -> Fetched {
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        Fetched {
            path,
            from_cache: true,
            resumed_at: 0,
            len,
            sha256: None,
        }
    }
}

/// Makes sure the `hf:` model is in `cache_dir`: a complete cached copy (or the Hugging Face
/// tools' copy, [`HfSpec::hub_cached`]) is used as is, without the network; otherwise the file is downloaded (or an interrupted download resumed) with a
/// progress bar (bytes, rate, time left) drawn to `progress`, and verified before it enters the
/// cache. Says on stderr what it downloads and what it verified.
pub fn fetch(
    spec: &HfSpec,
    hub: &HubConfig,
    cache_dir: &Path,
    progress: ProgressDrawTarget,
) -> Result<Fetched, HfError> {
    let origin = Origin::of(&hub.endpoint);
    let agent = crate::net::agent();
    // Ours first, then the Hugging Face tools' copy; a branch or tag is checked against the
    // Hub's sha256 with one HEAD.
    let ours = spec.cached(cache_dir);
    let theirs = || hub.hub_cache.as_deref().and_then(|h| spec.hub_cached(h));
    let newer = match ours.clone().or_else(theirs) {
        Some(p) => match origin
            .as_ref()
            .and_then(|o| revalidate(&agent, spec, hub, o, &p))
        {
            None => {
                if ours.is_none() {
                    eprintln!("wgllm: {spec} from the Hugging Face cache: {}", p.display());
                }
                return Ok(Fetched::cached(p));
            }
            Some(remote) => {
                eprintln!("wgllm: {spec} changed on the Hub since it was downloaded; updating it");
                Some(remote)
            }
        },
        None if hub.offline => return Err(HfError::Offline(spec.to_string())),
        None => None,
    };
    let updating = newer.is_some();
    let origin = origin.ok_or_else(|| HfError::BadEndpoint(hub.endpoint.clone()))?;
    let remote = match newer {
        Some(r) => r,
        None => probe(&agent, spec, hub, &origin)?,
    };
    // Into the Hugging Face tools' layout when the Hub names the commit and the sha256 (as
    // the Hub does), else into ours.
    let target = match (&hub.hub_cache, &remote.commit, &remote.sha256) {
        (Some(h), Some(commit), Some(sha)) => Some(hub_target(h, spec, commit, sha)),
        _ => None,
    };
    let (dest, part_path) = match &target {
        Some(t) => (t.blob.clone(), t.incomplete()),
        None => {
            let dest = spec.cache_path(cache_dir);
            let mut part_name = dest.file_name().unwrap_or_default().to_os_string();
            part_name.push(".part");
            let part = dest.with_file_name(part_name);
            (dest, part)
        }
    };
    let dir = dest.parent().unwrap_or(cache_dir);
    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
    // The same bytes already in the tools' cache (another revision's): only the links.
    if let Some(t) = &target {
        let have = std::fs::metadata(&t.blob).map_or(None, |m| Some(m.len()));
        if have.is_some() && have == remote.size {
            return publish(t, spec, cache_dir).map(Fetched::cached);
        }
    }
    let part = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&part_path)
        .map_err(write_err(&part_path))?;
    match part.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Err(HfError::Busy(spec.to_string())),
        Err(TryLockError::Error(e)) => return Err(HfError::Io(part_path.display().to_string(), e)),
    }
    // Another process may have finished while this one waited for the lock.
    if !updating {
        if let Some(p) = spec.cached(cache_dir).or_else(theirs) {
            return Ok(Fetched::cached(p));
        }
    }
    let mut job = Job {
        agent,
        spec,
        hub,
        origin,
        remote,
        part,
        part_path: &part_path,
    };
    let result = job.run(progress);
    let part = job.part;
    let (len, resumed_at) = match result {
        Ok(done) => done,
        Err(e) => {
            // Keep what can be resumed; drop what is known to be wrong, or empty.
            let empty = part.metadata().is_ok_and(|m| m.len() == 0);
            let wrong = matches!(
                e,
                HfError::NotGguf { .. } | HfError::Size { .. } | HfError::Checksum { .. }
            );
            if empty || wrong {
                drop(part);
                let _ = std::fs::remove_file(&part_path);
            }
            return Err(e);
        }
    };
    part.sync_all().map_err(write_err(&part_path))?;
    drop(part);
    std::fs::rename(&part_path, &dest).map_err(io_err(&dest))?;
    let sha256 = job.remote.sha256;
    let path = match &target {
        Some(t) => publish(t, spec, cache_dir)?,
        None => {
            // What the next run compares the Hub's sha256 with ([`revalidate`]).
            match &sha256 {
                Some(sha) => std::fs::write(sha_path(&dest), sha).map_err(write_err(&dest))?,
                None => {
                    let _ = std::fs::remove_file(sha_path(&dest));
                }
            }
            dest
        }
    };
    let checked = match &sha256 {
        Some(sha) => format!("sha256 {sha} matches the server's"),
        None => "the server named no sha256".into(),
    };
    eprintln!(
        "wgllm: saved {} ({len} bytes; GGUF magic checked; {checked})",
        path.display()
    );
    Ok(Fetched {
        path,
        from_cache: false,
        resumed_at,
        len,
        sha256,
    })
}

/// Where `spec`'s file, whose content is `sha256`, goes in the Hugging Face cache at `hub_cache`
/// at `commit`: `models--OWNER--REPO/{blobs,snapshots,refs}`.
pub(crate) fn hub_target(hub_cache: &Path, spec: &HfSpec, commit: &str, sha256: &str) -> Target {
    let repo = hub_cache.join(format!("models--{}--{}", spec.owner, spec.repo));
    let mut link = repo.join("snapshots").join(commit);
    link.extend(spec.file.split('/'));
    let reference = (spec.revision != commit).then(|| {
        let mut r = repo.join("refs");
        r.extend(spec.revision.split('/'));
        r
    });
    Target {
        blob: repo.join("blobs").join(sha256.to_ascii_lowercase()),
        link,
        reference,
        commit: commit.to_string(),
    }
}

/// The tools' snapshot entry for a complete blob, and its ref; an older copy in wgllm's own
/// layout goes (it would be found first, and is stale). Returns the entry's path.
fn publish(t: &Target, spec: &HfSpec, cache_dir: &Path) -> Result<PathBuf, HfError> {
    t.publish().map_err(write_err(&t.link))?;
    let old = spec.cache_path(cache_dir);
    for p in [sha_path(&old), old] {
        let _ = std::fs::remove_file(p);
    }
    Ok(t.link.clone())
}

/// Where the sha256 the Hub gave for a cached file is kept beside it.
pub fn sha_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    file.with_file_name(name)
}

/// Whether the cached copy `path` of `spec` must be downloaded again: `Some` with the Hub's
/// answer when its sha256 (or, without one on either side, its size) differs; `None` to use the
/// copy — offline, pinned to a commit, the Hub unreachable or answering an error (said on
/// stderr), or unchanged.
fn revalidate(
    agent: &ureq::Agent,
    spec: &HfSpec,
    hub: &HubConfig,
    origin: &Origin,
    path: &Path,
) -> Option<Remote> {
    let commit = spec.revision.len() == 40 && spec.revision.bytes().all(|b| b.is_ascii_hexdigit());
    if hub.offline || commit {
        return None;
    }
    let remote = match probe(agent, spec, hub, origin) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wgllm: using the cached {spec} ({e})");
            return None;
        }
    };
    // Ours keeps the sha256 beside the file; the tools' blob is named by it.
    let ours = std::fs::read_to_string(sha_path(path)).ok().or_else(|| {
        let blob = std::fs::canonicalize(path).ok()?;
        let name = blob.file_name()?.to_str()?.to_string();
        (name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())).then_some(name)
    });
    let changed = match (&remote.sha256, ours.as_deref().map(str::trim)) {
        (Some(theirs), Some(ours)) => !theirs.eq_ignore_ascii_case(ours),
        _ => {
            let len = std::fs::metadata(path).map_or(0, |m| m.len());
            remote.size.is_some_and(|s| s != len)
        }
    };
    changed.then_some(remote)
}

/// What a `GET` from some byte on brought.
enum Answer {
    /// The bytes from where they were asked for, and the file's size if the server named it.
    Bytes(ureq::http::Response<ureq::Body>, Option<u64>),
    /// The whole file, though a range was asked for: the server ignores ranges.
    Whole(ureq::http::Response<ureq::Body>, Option<u64>),
    /// Nothing usable from that byte (416, or a range other than the one asked for).
    Refused,
}

/// One download: where from, and the locked `.part` file it goes to.
struct Job<'a> {
    agent: ureq::Agent,
    spec: &'a HfSpec,
    hub: &'a HubConfig,
    origin: Origin,
    remote: Remote,
    part: File,
    part_path: &'a Path,
}

impl Job<'_> {
    fn restart(&mut self) -> Result<Partial, HfError> {
        self.part.set_len(0).map_err(io_err(self.part_path))?;
        Ok(Partial::empty())
    }

    /// `GET` from byte `from` on.
    fn get(&self, from: u64) -> Result<Answer, HfError> {
        let url = &self.remote.url;
        let mut req = self.agent.get(url);
        if let (Some(token), true) = (&self.hub.token, self.origin.owns(url)) {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        if from > 0 {
            req = req.header("Range", format!("bytes={from}-"));
        }
        let resp = req.call().map_err(|e| net_error(url, e))?;
        let h = resp.headers();
        Ok(match resp.status().as_u16() {
            206 if from > 0 => match content_range_total(header(h, "content-range"), from) {
                Some(total) => Answer::Bytes(resp, total),
                None => Answer::Refused,
            },
            200 => {
                let total = header(h, "content-length").and_then(|v| v.parse().ok());
                if from > 0 {
                    Answer::Whole(resp, total)
                } else {
                    Answer::Bytes(resp, total)
                }
            }
            416 if from > 0 => Answer::Refused,
            status => return Err(status_error(status, h, self.spec, self.hub, url)),
        })
    }

    /// Brings the `.part` file to the whole file and checks it. Returns its length and where this
    /// run resumed.
    fn run(&mut self, progress: ProgressDrawTarget) -> Result<(u64, u64), HfError> {
        let spec = self.spec;
        let host = host_of(&self.remote.url);
        let mut have = Partial::read(&mut self.part, self.part_path)?;
        if !have.may_be_gguf() || self.remote.size.is_some_and(|s| have.len > s) {
            have = self.restart()?;
        }
        let mut total = self.remote.size;
        let mut resumed_at = have.len;
        if have.len == 0 || total != Some(have.len) {
            // From byte 0 the answer is never `Refused`, so this asks at most twice.
            let (resp, announced) = loop {
                match self.get(have.len)? {
                    Answer::Bytes(resp, total) => break (resp, total),
                    Answer::Whole(resp, total) => {
                        eprintln!("wgllm: {host} does not resume downloads; starting over");
                        have = self.restart()?;
                        break (resp, total);
                    }
                    Answer::Refused => {
                        eprintln!("wgllm: {host} refused to resume the download; starting over");
                        have = self.restart()?;
                    }
                }
            };
            resumed_at = have.len;
            total = total.or(announced);
            eprintln!(
                "wgllm: downloading {spec} from {host}{}{}",
                total.map_or(String::new(), |t| format!(" ({t} bytes)")),
                if have.len > 0 {
                    format!(", resuming at byte {}", have.len)
                } else {
                    String::new()
                }
            );
            self.part
                .seek(SeekFrom::Start(have.len))
                .map_err(io_err(self.part_path))?;
            let bar = progress_bar(spec, total, have.len, progress);
            let mut body = resp.into_body().into_reader();
            let mut buf = vec![0u8; 256 << 10];
            loop {
                let n = match body.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        bar.abandon();
                        let _ = self.part.flush();
                        return Err(HfError::Interrupted {
                            host,
                            at: have.len,
                            reason: e.to_string(),
                        });
                    }
                };
                self.part
                    .write_all(&buf[..n])
                    .map_err(write_err(self.part_path))?;
                have.push(&buf[..n]);
                if !have.may_be_gguf() {
                    bar.abandon();
                    return Err(have.not_gguf(spec));
                }
                bar.set_position(have.len);
            }
            bar.finish();
        }
        if let Some(want) = total.filter(|&t| t != have.len) {
            return Err(if have.len < want {
                HfError::Interrupted {
                    host,
                    at: have.len,
                    reason: format!("the server closed the connection before byte {want}"),
                }
            } else {
                HfError::Size {
                    spec: spec.to_string(),
                    got: have.len,
                    want,
                }
            });
        }
        if have.head != GGUF_MAGIC {
            return Err(have.not_gguf(spec));
        }
        if let Some(want) = &self.remote.sha256 {
            let got: String = have
                .hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if &got != want {
                return Err(HfError::Checksum {
                    spec: spec.to_string(),
                    got,
                    want: want.clone(),
                });
            }
        }
        Ok((have.len, resumed_at))
    }
}

/// A bar of bytes, rate and time left (a byte counter and rate when the size is unknown).
fn progress_bar(
    spec: &HfSpec,
    total: Option<u64>,
    at: u64,
    target: ProgressDrawTarget,
) -> ProgressBar {
    let template = match total {
        Some(_) => "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
        None => "{msg} {bytes} {binary_bytes_per_sec}",
    };
    let bar = ProgressBar::with_draw_target(total, target).with_style(
        ProgressStyle::with_template(template)
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(
        spec.file
            .rsplit('/')
            .next()
            .unwrap_or(&spec.file)
            .to_string(),
    );
    bar.set_position(at);
    bar.reset_eta();
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_into_url_and_cache_path() {
        let s = HfSpec::parse(
            "hf:bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_K_M.gguf",
        )
        .unwrap();
        assert_eq!(s.revision, "main");
        assert_eq!(
            s.url("http://h:8/"),
            "http://h:8/bartowski/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct-Q4_K_M.gguf"
        );
        let s = HfSpec::parse("hf:o/r/dir/my model.GGUF@refs/pr/1").unwrap();
        assert_eq!(s.file, "dir/my model.GGUF");
        assert_eq!(
            s.url("https://x"),
            "https://x/o/r/resolve/refs%2Fpr%2F1/dir/my%20model.GGUF"
        );
        assert_eq!(
            s.cache_path(Path::new("/c")),
            Path::new("/c/hf/o/r/refs%2Fpr%2F1/dir/my model.GGUF")
        );
        assert_eq!(s.to_string(), "hf:o/r/dir/my model.GGUF@refs/pr/1");
    }

    #[test]
    fn malformed_specs_are_refused_with_the_reason() {
        for (spec, why) in [
            ("hf:", "names no file"),
            ("hf:owner/repo", "names no file"),
            ("hf:owner//f.gguf", "OWNER and REPO"),
            ("hf:ow ner/repo/f.gguf", "OWNER and REPO"),
            ("hf:../repo/f.gguf", "OWNER and REPO"),
            ("hf:o/r/model.bin", "not a .gguf"),
            ("hf:o/r/../../x.gguf", "'..'"),
            ("hf:o/r/a//x.gguf", "empty"),
            ("hf:o/r/x.gguf@", "revision"),
            ("hf:o/r/x.gguf@a b", "revision"),
            ("hf:o/r/x.gguf@../x", "revision"),
            ("o/r/x.gguf", "hf:"),
        ] {
            let e = HfSpec::parse(spec).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("hf:OWNER/REPO/FILE.gguf"),
                "{spec}: {e}"
            );
        }
    }

    #[test]
    fn etags_give_a_sha256_only_when_they_are_one() {
        let sha = "B179C9523D0E6A0F98A330C7562B682750A6F8C8C15E5BC70EA373728110DB53";
        assert_eq!(
            etag_sha256(&format!("\"{sha}\"")),
            Some(sha.to_ascii_lowercase())
        );
        assert_eq!(
            etag_sha256(&format!("W/\"{sha}\"")),
            Some(sha.to_ascii_lowercase())
        );
        assert_eq!(
            etag_sha256("\"9ef9e0b1c6e0c56b1e3f6b1f4e4b1f2a3c4d5e6f\""),
            None
        );
    }

    #[test]
    fn a_full_disk_is_named_as_such() {
        let e = write_err(Path::new("/c/x.part"))(io::Error::from(io::ErrorKind::StorageFull));
        assert!(
            e.to_string().starts_with("disk full writing /c/x.part"),
            "{e}"
        );
    }

    #[test]
    fn content_ranges_must_start_where_asked() {
        assert_eq!(
            content_range_total(Some("bytes 10-99/100"), 10),
            Some(Some(100))
        );
        assert_eq!(content_range_total(Some("bytes 10-99/*"), 10), Some(None));
        assert_eq!(content_range_total(Some("bytes 0-99/100"), 10), None);
        assert_eq!(content_range_total(None, 10), None);
    }
}
