//! Runs `wgllm web` as a user would, on a scratch page directory and a scratch model cache: the
//! page, its wasm, a cached model (whole and by byte range), refused paths, and the one-line errors
//! for a page that was never built and a port that is taken.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};

use common::{assert_one_error_line, text, tiny, wgllm, Scratch};

const INDEX: &str = "<!doctype html><title>chat</title>";
const GLUE: &str = "export default function init() {}";
const WASM: &[u8] = b"\0asm\x01\0\0\0";

/// A built page (index.html, pkg/) and a model cache holding `small.gguf` (the tiny synthetic
/// model, a real GGUF as the page would load).
fn site(s: &Scratch) -> (String, Vec<u8>) {
    let page = s.path("page");
    std::fs::create_dir_all(format!("{page}/pkg")).unwrap();
    std::fs::write(format!("{page}/index.html"), INDEX).unwrap();
    std::fs::write(format!("{page}/pkg/wgllm_web.js"), GLUE).unwrap();
    std::fs::write(format!("{page}/pkg/wgllm_web_bg.wasm"), WASM).unwrap();
    std::fs::write(format!("{page}/.secret"), "hidden").unwrap();
    let models = s.path("cache/wgllm/models");
    std::fs::create_dir_all(&models).unwrap();
    let model = std::fs::read(tiny(s)).unwrap();
    std::fs::write(format!("{models}/small.gguf"), &model).unwrap();
    (page, model)
}

/// `wgllm web --port 0` in the background; killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(s: &Scratch, page: &str) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wgllm"))
            .args(["web", "--port", "0", "--dir", page])
            .env("XDG_CACHE_HOME", s.path("cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the wgllm binary runs");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no URL in the first line: {first:?}"))
            .to_string();
        Server { child, addr }
    }

    /// One GET with `extra` header lines; the status code, headers (lower-cased) and body.
    fn get(&self, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
        let mut c = TcpStream::connect(&self.addr).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{extra}Connection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut raw = Vec::new();
        c.read_to_end(&mut raw).unwrap();
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a complete header");
        let head = text(&raw[..split]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head, raw[split + 4..].to_vec())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serves_the_page_and_the_model_cache() {
    let s = Scratch::new("web-serve");
    let (page, model) = site(&s);
    let server = Server::start(&s, &page);

    let (status, head, body) = server.get("/", "");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", INDEX.len())),
        "{head}"
    );
    assert_eq!(body, INDEX.as_bytes());

    let (status, head, body) = server.get("/pkg/wgllm_web_bg.wasm", "");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: application/wasm"), "{head}");
    assert_eq!(body, WASM);
    let (_, head, _) = server.get("/pkg/wgllm_web.js", "");
    assert!(head.contains("content-type: text/javascript"), "{head}");

    let (status, head, body) = server.get("/models/small.gguf", "");
    assert_eq!(status, 200, "{head}");
    let len = model.len();
    assert!(head.contains(&format!("content-length: {len}")), "{head}");
    assert_eq!(body, model);

    let (status, head, body) = server.get("/models/small.gguf", "Range: bytes=100-199\r\n");
    assert_eq!(status, 206, "{head}");
    assert!(
        head.contains(&format!("content-range: bytes 100-199/{len}")),
        "{head}"
    );
    assert_eq!(body, &model[100..200]);

    assert_eq!(server.get("/models/absent.gguf", "").0, 404);
}

#[test]
fn refuses_paths_outside_the_page_and_the_cache() {
    let s = Scratch::new("web-refuse");
    let (page, _) = site(&s);
    let server = Server::start(&s, &page);
    for path in [
        "/models/../page/index.html",
        "/models/%2e%2e/page/index.html",
        "/models/..%2fpage%2findex.html",
        "/../cache/wgllm/models/small.gguf",
        "/models//etc/passwd",
        "/models/%2fetc%2fpasswd",
        "/.secret",
    ] {
        let (status, head, body) = server.get(path, "");
        assert!(
            status == 403 || status == 404,
            "{path}: {head}\n{}",
            text(&body)
        );
    }
}

#[test]
fn a_page_that_was_never_built_is_one_error_line() {
    let s = Scratch::new("web-unbuilt");
    let o = wgllm(&["web", "--port", "0", "--dir", &s.path("nothing")], &[]);
    assert_one_error_line(&o, "run web/build.sh first");
}

#[test]
fn a_taken_port_is_one_error_line() {
    let s = Scratch::new("web-taken");
    let (page, _) = site(&s);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let o = wgllm(&["web", "--port", &port, "--dir", &page], &[]);
    assert_one_error_line(&o, "already in use");
}
