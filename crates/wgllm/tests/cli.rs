//! Runs the `wgllm` binary on files written by `GgufWriter`: `info`, `gguf dequant`, and the
//! one-line `error: …` on failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wgllm_core::DType;
use wgllm_gguf::{Array, GgufWriter, Value};

fn wgllm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wgllm"))
        .args(args)
        .output()
        .expect("the wgllm binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A temporary file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, bytes: &[u8]) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("wgllm-cli-{}-{tag}.gguf", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn model() -> Vec<u8> {
    let mut w = GgufWriter::new();
    let x: Vec<u8> = (0..6)
        .flat_map(|i| (i as f32 - 1.5).to_le_bytes())
        .collect();
    // 1.0, -2.0 and 0.25 as IEEE binary16.
    let h: Vec<u8> = [0x3c00u16, 0xc000, 0x3400]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .unwrap()
        .add_metadata("llama.block_count", Value::U32(2))
        .unwrap()
        .add_metadata(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(
                (0..1000).map(|i| format!("tok{i}")).collect(),
            )),
        )
        .unwrap()
        .add_tensor("x", DType::F32, &[3, 2], x)
        .unwrap()
        .add_tensor("h", DType::F16, &[3], h)
        .unwrap();
    w.to_vec()
}

#[test]
fn info_prints_metadata_tensors_and_totals() {
    let f = TempFile::new("info", &model());
    let o = wgllm(&["info", f.path()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("GGUF v3, "), "{text}");
    assert!(text.contains("llama.block_count"), "{text}");
    assert!(
        text.contains(r#"[1000 × string] "tok0", "tok1", "tok2", "tok3", …"#),
        "{text}"
    );
    assert!(text.contains("  x     f32    3 × 2"), "{text}");
    assert!(
        text.contains("total: 2 tensors, 9 parameters, 30 bytes"),
        "{text}"
    );
}

#[test]
fn dequant_prints_one_row_a_line() {
    let f = TempFile::new("dequant", &model());
    let o = wgllm(&["gguf", "dequant", f.path(), "x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "-1.5 -0.5 0.5\n1.5 2.5 3.5\n");
    let o = wgllm(&["gguf", "dequant", f.path(), "x", "--rows", "1"]);
    assert_eq!(stdout(&o), "-1.5 -0.5 0.5\n");
    let o = wgllm(&["gguf", "dequant", f.path(), "h", "--rows", "9"]);
    assert_eq!(stdout(&o), "1.0 -2.0 0.25\n");
}

#[test]
fn failures_print_one_error_line_and_exit_non_zero() {
    let f = TempFile::new("err", &model());
    let o = wgllm(&["gguf", "dequant", f.path(), "missing"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: no tensor named \"missing\""),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let mut bad = model();
    bad.truncate(bad.len() - 30); // into the last tensor, past its padding
    let f = TempFile::new("truncated", &bad);
    let o = wgllm(&["info", f.path()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: tensor \"h\": data at file bytes"),
        "{err}"
    );
    assert!(Path::new(f.path()).exists());
}
