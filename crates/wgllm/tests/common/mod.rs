//! What the CLI tests that run models share: the binary, a scratch directory, a tiny synthetic
//! model, and the one-error-line check.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the wgllm binary with `env` added (and no Hub settings inherited from the caller).
pub fn wgllm(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wgllm"));
    c.args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env_remove("HF_ENDPOINT")
        .env_remove("HF_TOKEN");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the wgllm binary runs")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// A per-test scratch directory (fresh, also usable as the XDG cache), removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("wgllm-cli-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the tiny synthetic model (q8_0) into `s` and returns its path.
pub fn tiny(s: &Scratch) -> String {
    let path = s.path("tiny.gguf");
    let o = wgllm(
        &["synth", "--preset", "tiny", "--dtype", "q8_0", "-o", &path],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    path
}

/// Exactly one line on stderr, starting with `error: ` and containing `want`; exit code 1.
pub fn assert_one_error_line(o: &Output, want: &str) {
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {}\nstderr: {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(want), "expected '{want}' in: {err}");
}
