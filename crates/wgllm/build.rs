//! Puts the browser page into the binary when it has been built (`web/build.sh` writes
//! `web/pkg/`): `wgllm web` then serves it from memory wherever the binary is installed. The
//! generated `web_assets.rs` holds `PAGE`, the page's files by path, empty without `web/pkg/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The page's own files and the package it runs on (`lib/`), beside the wasm module and its
/// glue in `pkg/`.
const PAGE: [&str; 5] = [
    "index.html",
    "app.js",
    "markdown.js",
    "lib/index.js",
    "lib/worker.js",
];

fn main() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web");
    let pkg = web.join("pkg");
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    if pkg.join("wgllm_web.js").is_file() && pkg.join("wgllm_web_bg.wasm").is_file() {
        for f in PAGE {
            files.push((f.to_string(), web.join(f)));
        }
        for f in ["wgllm_web.js", "wgllm_web_bg.wasm"] {
            files.push((format!("pkg/{f}"), pkg.join(f)));
        }
    }
    for f in PAGE {
        println!("cargo:rerun-if-changed={}", web.join(f).display());
    }
    // The folder while it is absent (web/build.sh creating it changes web/), else its files.
    match pkg.is_dir() {
        true => println!("cargo:rerun-if-changed={}", pkg.display()),
        false => println!("cargo:rerun-if-changed={}", web.display()),
    }
    let mut src =
        String::from("/// The browser page's files by path (empty: built without web/pkg).\n");
    src.push_str("pub const PAGE: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        let path = path
            .canonicalize()
            .expect("a page file that was just found");
        writeln!(
            src,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    src.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("web_assets.rs"), src).expect("writing web_assets.rs");
}
