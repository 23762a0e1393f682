//! `hf:` downloads against a tiny HTTP server in the test (never the internet): it answers like the
//! Hub — `HEAD`/`GET` on `/OWNER/REPO/resolve/REV/FILE` with `X-Linked-Etag`/`X-Linked-Size` and a
//! redirect to a content store that honours `Range` — or, per test, refuses, cuts off, ignores
//! ranges or sends something that is not GGUF.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use indicatif::{ProgressDrawTarget, TermLike};
use sha2::{Digest, Sha256};
use wgllm_core::DType;
use wgllm_gguf::{GgufFile, GgufWriter};
use wgllm_models::config::HubConfig;
use wgllm_models::hf::{fetch, Fetched, HfError, HfSpec};

/// A small valid GGUF (one 256 KiB tensor).
fn gguf() -> Vec<u8> {
    let data: Vec<u8> = (0..65_536u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let mut w = GgufWriter::new();
    w.add_tensor("w", DType::F32, &[65_536], data).unwrap();
    w.to_vec()
}

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    range: Option<String>,
    auth: Option<String>,
}

/// How the server behaves.
#[derive(Clone)]
struct Behaviour {
    /// Resolve paths (`/o/r/resolve/main/f.gguf`) and their bytes.
    files: HashMap<String, Vec<u8>>,
    /// The sha256 announced in `X-Linked-Etag` (`None`: the real one; `Some("")`: none).
    etag: Option<String>,
    /// Bearer token the resolve endpoint demands.
    token: Option<String>,
    /// Whether the content store honours `Range`.
    ranges: bool,
    /// Close the first body after this many bytes.
    cut_after: Option<usize>,
}

impl Behaviour {
    fn serving(path: &str, bytes: Vec<u8>) -> Behaviour {
        Behaviour {
            files: HashMap::from([(path.to_string(), bytes)]),
            etag: None,
            token: None,
            ranges: true,
            cut_after: None,
        }
    }
}

struct Server {
    endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(b: Behaviour) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, ep) = (seen.clone(), endpoint.clone());
        let cut_done = Arc::new(AtomicBool::new(false));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                serve(conn, &b, &ep, &log, &cut_done);
            }
        });
        Server { endpoint, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn respond(conn: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body);
}

fn serve(
    mut conn: TcpStream,
    b: &Behaviour,
    endpoint: &str,
    log: &Mutex<Vec<Seen>>,
    cut_done: &AtomicBool,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let seen = Seen {
        method: method.clone(),
        path: path.clone(),
        range: headers.get("range").cloned(),
        auth: headers.get("authorization").cloned(),
    };
    log.lock().unwrap().push(seen.clone());
    let head = method == "HEAD";
    if let Some(resolve) = path.strip_prefix("/cdn") {
        // The content store: no token needed (its URLs are signed), ranges if allowed.
        let Some(bytes) = b.files.get(resolve) else {
            return respond(
                &mut conn,
                "404 Not Found",
                &[("Content-Length", "0".into())],
                b"",
            );
        };
        let start = match (&seen.range, b.ranges) {
            (Some(r), true) => r
                .strip_prefix("bytes=")
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|s| s.parse::<usize>().ok())
                .unwrap(),
            _ => 0,
        };
        if start >= bytes.len() && start > 0 {
            return respond(
                &mut conn,
                "416 Range Not Satisfiable",
                &[("Content-Length", "0".into())],
                b"",
            );
        }
        let body = &bytes[start..];
        let mut hs = vec![("Content-Length", body.len().to_string())];
        let status = if start > 0 {
            hs.push((
                "Content-Range",
                format!("bytes {start}-{}/{}", bytes.len() - 1, bytes.len()),
            ));
            "206 Partial Content"
        } else {
            "200 OK"
        };
        let body = match b.cut_after {
            Some(n) if !cut_done.swap(true, Ordering::SeqCst) => &body[..n],
            _ => body,
        };
        return respond(&mut conn, status, &hs, if head { b"" } else { body });
    }
    if let Some(t) = &b.token {
        if seen.auth.as_deref() != Some(&format!("Bearer {t}")) {
            let status = if seen.auth.is_some() {
                "403 Forbidden"
            } else {
                "401 Unauthorized"
            };
            return respond(
                &mut conn,
                status,
                &[
                    ("X-Error-Code", "GatedRepo".into()),
                    ("Content-Length", "0".into()),
                ],
                b"",
            );
        }
    }
    let Some(bytes) = b.files.get(&path) else {
        return respond(
            &mut conn,
            "404 Not Found",
            &[
                ("X-Error-Code", "EntryNotFound".into()),
                ("Content-Length", "0".into()),
            ],
            b"",
        );
    };
    // The commit a revision is at: here, one for each content.
    let mut hs = vec![
        ("Location", format!("{endpoint}/cdn{path}")),
        ("X-Repo-Commit", sha256(bytes)[..40].to_string()),
        ("X-Linked-Size", bytes.len().to_string()),
        ("Content-Length", "0".into()),
    ];
    match &b.etag {
        None => hs.push(("X-Linked-Etag", format!("\"{}\"", sha256(bytes)))),
        Some(e) if !e.is_empty() => hs.push(("X-Linked-Etag", format!("\"{e}\""))),
        Some(_) => {}
    }
    respond(&mut conn, "302 Found", &hs, b"");
}

/// A per-test cache directory, removed on drop.
struct Cache(PathBuf);

impl Cache {
    fn new(tag: &str) -> Cache {
        let p = std::env::temp_dir().join(format!("wgllm-hf-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Cache(p)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SPEC: &str = "hf:test-org/Tiny-GGUF/tiny.Q8_0.gguf";
const RESOLVE: &str = "/test-org/Tiny-GGUF/resolve/main/tiny.Q8_0.gguf";

fn hub(s: &Server) -> HubConfig {
    HubConfig {
        endpoint: s.endpoint.clone(),
        token: None,
        hub_cache: None,
        offline: false,
    }
}

/// A terminal that keeps what is drawn on it.
#[derive(Debug, Default, Clone)]
struct Screen(Arc<Mutex<String>>);

impl TermLike for Screen {
    fn width(&self) -> u16 {
        120
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write_str(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.lock().unwrap().push_str(s);
        Ok(())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

fn get(hub: &HubConfig, cache: &Cache) -> Result<Fetched, HfError> {
    let spec = HfSpec::parse(SPEC).unwrap();
    fetch(&spec, hub, &cache.0, ProgressDrawTarget::hidden())
}

fn part_of(p: &Path) -> PathBuf {
    p.with_file_name("tiny.Q8_0.gguf.part")
}

#[test]
fn downloads_with_progress_verifies_and_reuses_the_cache() {
    let model = gguf();
    let server = Server::start(Behaviour::serving(RESOLVE, model.clone()));
    let cache = Cache::new("dl");
    let screen = Screen::default();
    let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
    let got = fetch(
        &HfSpec::parse(SPEC).unwrap(),
        &hub(&server),
        &cache.0,
        target,
    )
    .unwrap();
    let path = cache.0.join("hf/test-org/Tiny-GGUF/main/tiny.Q8_0.gguf");
    assert_eq!(
        got,
        Fetched {
            path: path.clone(),
            from_cache: false,
            resumed_at: 0,
            len: model.len() as u64,
            sha256: Some(sha256(&model)),
        }
    );
    assert_eq!(std::fs::read(&path).unwrap(), model);
    assert!(GgufFile::open(&path).is_ok());
    assert!(!part_of(&path).exists());
    // The bar's last frame: the file name, all of its bytes, a rate and an ETA.
    let drawn = screen.0.lock().unwrap().clone();
    let kib = format!("{:.2} KiB", model.len() as f64 / 1024.0);
    assert!(
        drawn.contains("tiny.Q8_0.gguf [")
            && drawn.contains(&format!("{kib}/{kib}"))
            && drawn.contains("/s ETA"),
        "{drawn}"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("HEAD", RESOLVE)
    );
    assert_eq!(seen[1].method, "GET");
    assert_eq!(seen[1].path, format!("/cdn{RESOLVE}"));
    assert_eq!(seen[1].range, None);

    // Cached: no request, even with the server gone.
    let gone = HubConfig {
        endpoint: "http://127.0.0.1:1".into(),
        token: None,
        hub_cache: None,
        offline: false,
    };
    let again = get(&gone, &cache).unwrap();
    assert!(again.from_cache && again.path == path && again.len == model.len() as u64);
    assert_eq!(server.seen().len(), 2);
}

#[test]
fn a_partial_file_is_resumed_with_a_range_request() {
    let model = gguf();
    let server = Server::start(Behaviour::serving(RESOLVE, model.clone()));
    let cache = Cache::new("resume");
    let dest = HfSpec::parse(SPEC).unwrap().cache_path(&cache.0);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(part_of(&dest), &model[..100_000]).unwrap();
    let got = get(&hub(&server), &cache).unwrap();
    // The sha256 covers the bytes already there too.
    assert_eq!(got.sha256, Some(sha256(&model)));
    assert_eq!(got.resumed_at, 100_000);
    assert_eq!(std::fs::read(&got.path).unwrap(), model);
    let seen = server.seen();
    assert_eq!(seen.last().unwrap().range.as_deref(), Some("bytes=100000-"));
}

#[test]
fn a_complete_partial_file_is_checked_and_kept_without_a_get() {
    let model = gguf();
    let server = Server::start(Behaviour::serving(RESOLVE, model.clone()));
    let cache = Cache::new("whole");
    let dest = HfSpec::parse(SPEC).unwrap().cache_path(&cache.0);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(part_of(&dest), &model).unwrap();
    let got = get(&hub(&server), &cache).unwrap();
    assert_eq!(got.resumed_at, model.len() as u64);
    assert_eq!(got.sha256, Some(sha256(&model)));
    assert_eq!(std::fs::read(&got.path).unwrap(), model);
    assert!(server.seen().iter().all(|s| s.method == "HEAD"));
}

#[test]
fn a_broken_download_is_kept_and_resumed_next_time() {
    let model = gguf();
    let b = Behaviour {
        cut_after: Some(50_000),
        ..Behaviour::serving(RESOLVE, model.clone())
    };
    let server = Server::start(b);
    let cache = Cache::new("cut");
    let e = get(&hub(&server), &cache).unwrap_err();
    assert!(matches!(e, HfError::Interrupted { .. }), "{e}");
    assert!(e.to_string().contains("run again to resume"), "{e}");
    let dest = HfSpec::parse(SPEC).unwrap().cache_path(&cache.0);
    let kept = std::fs::metadata(part_of(&dest)).unwrap().len();
    assert!(kept > 0 && kept <= 50_000, "{kept}");
    let got = get(&hub(&server), &cache).unwrap();
    assert_eq!(got.resumed_at, kept);
    assert_eq!(std::fs::read(&got.path).unwrap(), model);
    assert_eq!(
        server.seen().last().unwrap().range,
        Some(format!("bytes={kept}-"))
    );
}

#[test]
fn a_server_without_ranges_restarts_from_zero() {
    let model = gguf();
    let b = Behaviour {
        ranges: false,
        ..Behaviour::serving(RESOLVE, model.clone())
    };
    let server = Server::start(b);
    let cache = Cache::new("norange");
    let dest = HfSpec::parse(SPEC).unwrap().cache_path(&cache.0);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(part_of(&dest), &model[..1000]).unwrap();
    let got = get(&hub(&server), &cache).unwrap();
    assert_eq!(got.resumed_at, 0);
    assert_eq!(std::fs::read(&got.path).unwrap(), model);
    // The range was asked for, ignored, and the whole file in that answer used.
    let gets: Vec<_> = server
        .seen()
        .into_iter()
        .filter(|s| s.method == "GET")
        .collect();
    assert_eq!(gets.len(), 1, "{gets:?}");
    assert_eq!(gets[0].range.as_deref(), Some("bytes=1000-"));
}

#[test]
fn missing_files_name_the_repo_and_file() {
    let server = Server::start(Behaviour::serving("/elsewhere", gguf()));
    let cache = Cache::new("404");
    let e = get(&hub(&server), &cache).unwrap_err().to_string();
    assert!(
        e.contains("test-org/Tiny-GGUF has no file 'tiny.Q8_0.gguf' at revision 'main'")
            && e.contains("404"),
        "{e}"
    );
    assert!(!HfSpec::parse(SPEC).unwrap().cache_path(&cache.0).exists());
}

#[test]
fn gated_repos_ask_for_a_token_and_send_it() {
    let model = gguf();
    let b = Behaviour {
        token: Some("hf_secret".into()),
        ..Behaviour::serving(RESOLVE, model.clone())
    };
    let server = Server::start(b);
    let cache = Cache::new("401");
    let e = get(&hub(&server), &cache).unwrap_err().to_string();
    assert!(
        e.contains("needs a Hugging Face access token")
            && e.contains("HTTP 401")
            && e.contains("HF_TOKEN"),
        "{e}"
    );
    let wrong = HubConfig {
        token: Some("hf_wrong".into()),
        ..hub(&server)
    };
    let e = get(&wrong, &cache).unwrap_err().to_string();
    assert!(
        e.contains("refused the token") && e.contains("HTTP 403"),
        "{e}"
    );
    let right = HubConfig {
        token: Some("hf_secret".into()),
        ..hub(&server)
    };
    let got = get(&right, &cache).unwrap();
    assert_eq!(std::fs::read(&got.path).unwrap(), model);
    let last_head = server
        .seen()
        .into_iter()
        .rfind(|s| s.method == "HEAD")
        .unwrap();
    assert_eq!(last_head.auth.as_deref(), Some("Bearer hf_secret"));
}

#[test]
fn a_body_that_is_not_gguf_is_rejected_and_deleted() {
    let b = Behaviour {
        etag: Some(String::new()),
        ..Behaviour::serving(RESOLVE, b"<!doctype html><p>Sign in</p>".to_vec())
    };
    let server = Server::start(b);
    let cache = Cache::new("html");
    let e = get(&hub(&server), &cache).unwrap_err();
    assert!(matches!(e, HfError::NotGguf { .. }), "{e}");
    assert!(e.to_string().contains("not a GGUF file"), "{e}");
    let dest = HfSpec::parse(SPEC).unwrap().cache_path(&cache.0);
    assert!(!dest.exists() && !part_of(&dest).exists());
}

#[test]
fn a_sha256_mismatch_is_rejected_and_deleted() {
    let b = Behaviour {
        etag: Some("0".repeat(64)),
        ..Behaviour::serving(RESOLVE, gguf())
    };
    let server = Server::start(b);
    let cache = Cache::new("sha");
    let e = get(&hub(&server), &cache).unwrap_err();
    assert!(matches!(e, HfError::Checksum { .. }), "{e}");
    let dest = HfSpec::parse(SPEC).unwrap().cache_path(&cache.0);
    assert!(!dest.exists() && !part_of(&dest).exists());
}

#[test]
fn an_unreachable_endpoint_names_the_host() {
    let cache = Cache::new("down");
    // Port 1 on the loopback: nothing listens there.
    let hub = HubConfig {
        endpoint: "http://127.0.0.1:1".into(),
        token: None,
        hub_cache: None,
        offline: false,
    };
    let e = get(&hub, &cache).unwrap_err().to_string();
    assert!(e.starts_with("cannot reach 127.0.0.1:1"), "{e}");
    let bad = HubConfig {
        endpoint: "ftp://mirror".into(),
        token: None,
        hub_cache: None,
        offline: false,
    };
    let e = get(&bad, &cache).unwrap_err().to_string();
    assert!(e.contains("not an http:// or https:// URL"), "{e}");
}

#[test]
fn the_hugging_face_tools_cache_is_used_where_it_is() {
    // As huggingface_hub lays a download out: the blob, the snapshot's link to it, the ref.
    let cache = Cache::new("hubcache");
    let repo = cache.0.join("hub/models--test-org--Tiny-GGUF");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let bytes = gguf();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::write(repo.join("blobs").join(sha256(&bytes)), &bytes).unwrap();
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    let file = snap.join("tiny.Q8_0.gguf");
    #[cfg(unix)]
    std::os::unix::fs::symlink(format!("../../blobs/{}", sha256(&bytes)), &file).unwrap();
    // Where symbolic links need a privilege (Windows), huggingface_hub copies the file there.
    #[cfg(not(unix))]
    std::fs::write(&file, &bytes).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    // Nothing listens on port 1: the file must come from the tools' cache.
    let hub = HubConfig {
        endpoint: "http://127.0.0.1:1".into(),
        token: None,
        hub_cache: Some(cache.0.join("hub")),
        offline: false,
    };
    let got = get(&hub, &cache).unwrap();
    assert!(got.from_cache);
    assert_eq!(got.path, snap.join("tiny.Q8_0.gguf"));
    assert_eq!(std::fs::read(&got.path).unwrap(), bytes);
    // At a commit the tools never fetched, it is not there.
    let other = HfSpec::parse(&format!("{SPEC}@{}", "f".repeat(40))).unwrap();
    assert_eq!(other.hub_cached(&cache.0.join("hub")), None);
}

#[test]
fn offline_nothing_is_asked_of_the_network() {
    let server = Server::start(Behaviour::serving(RESOLVE, gguf()));
    let cache = Cache::new("offline");
    let offline = HubConfig {
        offline: true,
        ..hub(&server)
    };
    let e = get(&offline, &cache).unwrap_err();
    assert!(matches!(e, HfError::Offline(_)), "{e}");
    assert!(e.to_string().contains("HF_HUB_OFFLINE"), "{e}");
    assert!(server.seen().is_empty(), "{:?}", server.seen());
    // Once downloaded, the cached copy serves offline.
    get(&hub(&server), &cache).unwrap();
    let n = server.seen().len();
    assert!(get(&offline, &cache).unwrap().from_cache);
    assert_eq!(server.seen().len(), n);
}

#[test]
fn a_cached_branch_is_checked_with_one_head_and_updated_when_it_changed() {
    let v1 = gguf();
    let mut v2 = v1.clone();
    let n = v2.len();
    v2[n - 1] ^= 1;
    let cache = Cache::new("revalidate");
    let first = Server::start(Behaviour::serving(RESOLVE, v1.clone()));
    let path = get(&hub(&first), &cache).unwrap().path;
    assert_eq!(std::fs::read(&path).unwrap(), v1);
    // The same file on the Hub: one HEAD, the cached copy.
    let same = Server::start(Behaviour::serving(RESOLVE, v1.clone()));
    let got = get(&hub(&same), &cache).unwrap();
    assert!(got.from_cache);
    let seen = same.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "HEAD");
    // A new version on the Hub: downloaded over the old one.
    let changed = Server::start(Behaviour::serving(RESOLVE, v2.clone()));
    let got = get(&hub(&changed), &cache).unwrap();
    assert!(!got.from_cache);
    assert_eq!(got.path, path);
    assert_eq!(std::fs::read(&path).unwrap(), v2);
    // Pinned to a commit, the copy is never checked.
    let pinned = HfSpec::parse(&format!("{SPEC}@{}", "a".repeat(40))).unwrap();
    let gone = HubConfig {
        endpoint: "http://127.0.0.1:1".into(),
        ..hub(&changed)
    };
    let dest = pinned.cache_path(&cache.0);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(&dest, &v1).unwrap();
    let got = fetch(&pinned, &gone, &cache.0, ProgressDrawTarget::hidden()).unwrap();
    assert!(got.from_cache);
}

#[test]
fn downloads_go_into_the_hugging_face_tools_layout() {
    let v1 = gguf();
    let mut v2 = v1.clone();
    let n = v2.len();
    v2[n - 1] ^= 1;
    let cache = Cache::new("hublayout");
    let hub_dir = cache.0.join("hub");
    let with_hub = |s: &Server| HubConfig {
        hub_cache: Some(hub_dir.clone()),
        ..hub(s)
    };
    let repo = hub_dir.join("models--test-org--Tiny-GGUF");
    let first = Server::start(Behaviour::serving(RESOLVE, v1.clone()));
    let got = get(&with_hub(&first), &cache).unwrap();
    let c1 = &sha256(&v1)[..40];
    assert_eq!(
        got.path,
        repo.join("snapshots").join(c1).join("tiny.Q8_0.gguf")
    );
    assert_eq!(
        std::fs::read_link(&got.path).unwrap(),
        Path::new("../../blobs").join(sha256(&v1))
    );
    assert_eq!(std::fs::read(&got.path).unwrap(), v1);
    assert_eq!(std::fs::read_to_string(repo.join("refs/main")).unwrap(), c1);
    // Nothing in wgllm's own layout.
    assert!(!HfSpec::parse(SPEC).unwrap().cache_path(&cache.0).exists());
    // Unchanged: one HEAD. Changed: a new blob and snapshot, main moved to it.
    let same = Server::start(Behaviour::serving(RESOLVE, v1.clone()));
    assert!(get(&with_hub(&same), &cache).unwrap().from_cache);
    assert_eq!(same.seen().len(), 1);
    let changed = Server::start(Behaviour::serving(RESOLVE, v2.clone()));
    let got = get(&with_hub(&changed), &cache).unwrap();
    let c2 = &sha256(&v2)[..40];
    assert_eq!(
        got.path,
        repo.join("snapshots").join(c2).join("tiny.Q8_0.gguf")
    );
    assert_eq!(std::fs::read(&got.path).unwrap(), v2);
    assert_eq!(std::fs::read_to_string(repo.join("refs/main")).unwrap(), c2);
    assert!(repo.join("blobs").join(sha256(&v1)).exists());
}
