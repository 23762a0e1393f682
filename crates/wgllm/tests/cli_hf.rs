//! `-m hf:OWNER/REPO/FILE.gguf` as a user types it, against a small HTTP server in the test
//! standing in for the Hub (`--hf-endpoint` / `HF_ENDPOINT` point at it; nothing leaves the
//! machine): the file is downloaded into the cache once and used from there, and every failure is
//! one `error:` line with a non-zero exit. The downloader itself (resume, tokens, checksums) is
//! tested in crates/models/tests/hf_download.rs.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

mod common;

use common::{assert_one_error_line, text, tiny, wgllm, Scratch};

/// Serves `bytes` at `path` (HEAD and GET, no ranges) and 404 elsewhere; returns the endpoint.
fn serve(path: &'static str, bytes: Vec<u8>) -> String {
    serve_all(vec![(path, bytes)])
}

/// Serves each route's bytes at its path (with its query) and 404 elsewhere.
fn serve_all(routes: Vec<(&'static str, Vec<u8>)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
            }
            let mut it = line.split_whitespace();
            let (method, target) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
            let (status, body): (&str, &[u8]) = match routes.iter().find(|r| r.0 == target) {
                Some((_, bytes)) => ("200 OK", bytes),
                None => ("404 Not Found", b""),
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            if method == "GET" {
                let _ = conn.write_all(body);
            }
        }
    });
    endpoint
}

const SPEC: &str = "hf:test-org/tiny-GGUF/tiny.gguf";
const RESOLVE: &str = "/test-org/tiny-GGUF/resolve/main/tiny.gguf";

#[test]
fn hf_models_are_downloaded_once_then_used_from_the_cache() {
    let s = Scratch::new("dl");
    let endpoint = serve(RESOLVE, std::fs::read(tiny(&s)).unwrap());
    let cache = s.path("cache");
    let tokenize = |endpoint: &str| {
        wgllm(
            &[
                "tokenize",
                "-m",
                SPEC,
                "--hf-endpoint",
                endpoint,
                "--no-special",
                "hi!",
            ],
            &[("XDG_CACHE_HOME", &cache)],
        )
    };
    let o = tokenize(&endpoint);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "104\n105\n33\n");
    assert!(
        text(&o.stderr).contains("GGUF magic checked"),
        "{}",
        text(&o.stderr)
    );
    assert!(std::path::Path::new(
        &s.path("cache/wgllm/models/hf/test-org/tiny-GGUF/main/tiny.gguf")
    )
    .is_file());
    // From the cache: nothing listens on port 1.
    let o = tokenize("http://127.0.0.1:1");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "104\n105\n33\n");

    // HF_ENDPOINT is read when --hf-endpoint is not given; `pull` takes hf: specs too.
    let other = Scratch::new("env");
    let o = wgllm(
        &["pull", SPEC],
        &[
            ("XDG_CACHE_HOME", &other.path("cache")),
            ("HF_ENDPOINT", &endpoint),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout)
        .trim_end()
        .ends_with("hf/test-org/tiny-GGUF/main/tiny.gguf"));
}

#[test]
fn hf_failures_are_one_error_line() {
    let s = Scratch::new("err");
    let cache = s.path("cache");
    let env = [("XDG_CACHE_HOME", cache.as_str())];
    let endpoint = serve(RESOLVE, b"GGUF".to_vec());
    let o = wgllm(&["tokenize", "-m", "hf:test-org", "x"], &env);
    assert_one_error_line(&o, "malformed model spec 'hf:test-org'");
    let o = wgllm(
        &[
            "run",
            "-m",
            "hf:test-org/tiny-GGUF/other.gguf",
            "--hf-endpoint",
            &endpoint,
            "-p",
            "x",
        ],
        &env,
    );
    assert_one_error_line(
        &o,
        "test-org/tiny-GGUF has no file 'other.gguf' at revision 'main'",
    );
    let o = wgllm(
        &[
            "tokenize",
            "-m",
            SPEC,
            "--hf-endpoint",
            "http://127.0.0.1:1",
            "x",
        ],
        &env,
    );
    assert_one_error_line(&o, "cannot reach 127.0.0.1:1");
}

#[test]
fn quant_tags_pick_the_repository_file_online_and_offline() {
    let s = Scratch::new("tag");
    let cache = s.path("cache");
    let env = [("XDG_CACHE_HOME", cache.as_str())];
    let tree = br#"[{"type":"file","path":"README.md"},{"type":"directory","path":"q"},
        {"type":"file","path":"q/tiny-Q8_0.gguf"},{"type":"file","path":"q/tiny-Q4_K_M.gguf"},
        {"type":"file","path":"tiny-F16-00001-of-00002.gguf"},
        {"type":"file","path":"tiny-F16-00002-of-00002.gguf"}]"#;
    let endpoint = serve_all(vec![
        (
            "/api/models/test-org/tiny-GGUF/tree/main?recursive=true",
            tree.to_vec(),
        ),
        (
            "/test-org/tiny-GGUF/resolve/main/q/tiny-Q8_0.gguf",
            std::fs::read(tiny(&s)).unwrap(),
        ),
    ]);
    let tokenize = |spec: &str, endpoint: &str| {
        wgllm(
            &[
                "tokenize",
                "-m",
                spec,
                "--hf-endpoint",
                endpoint,
                "--no-special",
                "hi!",
            ],
            &env,
        )
    };
    let o = tokenize("hf:test-org/tiny-GGUF:q8_0", &endpoint);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "104\n105\n33\n");
    let o = tokenize("hf:test-org/tiny-GGUF:Q5_K", &endpoint);
    assert_one_error_line(&o, "no .gguf file of the repository has the tag Q5_K");
    let o = tokenize("hf:test-org/tiny-GGUF:F16", &endpoint);
    // A split model is picked by its first file (not served here).
    assert_one_error_line(&o, "no file 'tiny-F16-00001-of-00002.gguf'");
    // Without a tag, Q4_K_M: listed, but this server has no such file.
    let o = tokenize("hf:test-org/tiny-GGUF", &endpoint);
    assert_one_error_line(&o, "has no file 'q/tiny-Q4_K_M.gguf'");
    // Offline, the tag resolves against what the cache holds.
    let o = tokenize("hf:test-org/tiny-GGUF:Q8_0", "http://127.0.0.1:1");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = tokenize("hf:test-org/tiny-GGUF:Q6_K", "http://127.0.0.1:1");
    assert_one_error_line(&o, "no .gguf file of the repository has the tag Q6_K");
}

#[test]
fn a_split_model_comes_down_whole_and_runs() {
    let s = Scratch::new("split");
    let m = tiny(&s);
    let o = wgllm(&["gguf", "split", &m, "--parts", "2"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let parts: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    let route = |i: usize| -> &'static str {
        Box::leak(
            format!("/test-org/tiny-GGUF/resolve/main/tiny-0000{i}-of-00002.gguf").into_boxed_str(),
        )
    };
    let endpoint = serve_all(vec![
        (route(1), std::fs::read(&parts[0]).unwrap()),
        (route(2), std::fs::read(&parts[1]).unwrap()),
    ]);
    let cache = s.path("cache");
    let tokenize = |endpoint: &str| {
        let spec = "hf:test-org/tiny-GGUF/tiny-00001-of-00002.gguf";
        let args = [
            "tokenize",
            "-m",
            spec,
            "--hf-endpoint",
            endpoint,
            "--no-special",
            "hi!",
        ];
        wgllm(&args, &[("XDG_CACHE_HOME", &cache)])
    };
    let o = tokenize(&endpoint);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "104\n105\n33\n");
    let dir = s.path("cache/wgllm/models/hf/test-org/tiny-GGUF/main");
    for i in 1..=2 {
        let p = format!("{dir}/tiny-0000{i}-of-00002.gguf");
        assert!(std::path::Path::new(&p).is_file(), "{p}");
    }
    // Both parts from the cache: nothing listens on port 1.
    let o = tokenize("http://127.0.0.1:1");
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn offline_a_tag_resolves_from_the_hugging_face_tools_cache() {
    let s = Scratch::new("hubcache");
    let m = tiny(&s);
    let snap = s.path("hub/models--test-org--tiny-GGUF/snapshots/abc123");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::copy(&m, format!("{snap}/tiny-Q8_0.gguf")).unwrap();
    std::fs::create_dir_all(s.path("hub/models--test-org--tiny-GGUF/refs")).unwrap();
    std::fs::write(
        s.path("hub/models--test-org--tiny-GGUF/refs/main"),
        "abc123",
    )
    .unwrap();
    let (cache, hub) = (s.path("cache"), s.path("hub"));
    let env = [
        ("XDG_CACHE_HOME", cache.as_str()),
        ("HF_HUB_CACHE", hub.as_str()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    let args = [
        "tokenize",
        "-m",
        "hf:test-org/tiny-GGUF:q8_0",
        "--no-special",
        "hi!",
    ];
    let o = wgllm(&args, &env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "104\n105\n33\n");
    assert!(
        text(&o.stderr).contains("from the Hugging Face cache"),
        "{}",
        text(&o.stderr)
    );
    // A file neither cache holds is one error line naming offline mode.
    let args = ["tokenize", "-m", "hf:test-org/tiny-GGUF/other.gguf", "x"];
    assert_one_error_line(&wgllm(&args, &env), "HF_HUB_OFFLINE");
}
