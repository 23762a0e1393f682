//! Smoke test of `wgllm bench` on a tiny synthetic model (lavapipe in CI): the JSON parses and
//! has every field with positive throughputs, the Markdown and CSV tables are well formed, and
//! `--profile` accounts for every dispatch. Nothing here asserts a speed.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn wgllm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wgllm"))
        .args(args)
        .output()
        .expect("the wgllm binary runs")
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "wgllm failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A tiny synthetic llama, removed on drop.
struct Model(PathBuf);

impl Model {
    fn new(tag: &str) -> Model {
        let path =
            std::env::temp_dir().join(format!("wgllm-bench-{}-{tag}.gguf", std::process::id()));
        let p = path.to_str().unwrap();
        ok(wgllm(&[
            "synth", "--preset", "tiny", "--dtype", "q4_0", "-o", p,
        ]));
        Model(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `wgllm bench -m MODEL ARGS…`, `args` split at spaces.
fn bench(m: &Model, args: &str) -> Output {
    let mut all = vec!["bench", "-m", m.path()];
    all.extend(args.split_whitespace());
    wgllm(&all)
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("'{key}' is not a number in {v}"))
}

#[test]
fn json_report_has_every_field_and_positive_rates() {
    let m = Model::new("json");
    let out = ok(bench(&m, "-p 8 -n 4 -r 1 -o json"));
    let v: Value = serde_json::from_str(&out).expect("bench -o json prints one JSON object");
    assert_eq!(v["backend"], "webgpu");
    assert!(v["adapter"].as_str().is_some_and(|a| !a.is_empty()));
    assert!(v["model"].as_str().unwrap().ends_with("-json.gguf"));
    for key in [
        "model_size",
        "model_n_params",
        "weight_bytes_per_token",
        "kv_bytes_per_position",
    ] {
        assert!(num(&v, key) > 0.0, "{key}");
    }
    assert!(num(&v, "model_size") >= num(&v, "weight_bytes_per_token"));
    assert!(num(&v["copy"], "gbps") > 0.0);
    let results = v["results"].as_array().unwrap();
    let tests: Vec<&str> = results
        .iter()
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["pp8", "tg4"]);
    for r in results {
        assert!(num(r, "avg_ts") > 0.0, "{r}");
        assert!(num(r, "stddev_ts") >= 0.0, "{r}");
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 1);
        assert_eq!(num(r, "n_ubatch"), 512.0);
    }
    let tg = &results[1];
    assert_eq!((num(tg, "n_prompt"), num(tg, "n_gen")), (0.0, 4.0));
    // Weights plus the K and V of 2.5 positions on average.
    let want = num(&v, "weight_bytes_per_token") + 2.5 * num(&v, "kv_bytes_per_position");
    assert_eq!(num(tg, "bytes_per_token"), want);
    assert!(num(tg, "gbps") > 0.0 && num(tg, "copy_fraction") > 0.0);
    assert!(
        results[0].get("bytes_per_token").is_none(),
        "pp rows have no roofline"
    );
    assert!(v["profile"].is_null());
}

#[test]
fn markdown_and_csv_tables_are_well_formed() {
    let m = Model::new("md");
    let json = m.0.with_extension("json");
    let args = format!("-p 8,16 -n 4 -r 1 --ubatch 4,8 --json {}", json.display());
    let out = ok(bench(&m, &args));
    let saved = std::fs::read_to_string(&json).expect("--json writes the report");
    let _ = std::fs::remove_file(&json);
    let v: Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 5);
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with('|')).collect();
    // Header, separator, pp8 and pp16 for both ubatches, tg4 once.
    assert_eq!(rows.len(), 2 + 5, "{out}");
    assert!(rows.iter().all(|r| r.matches('|').count() == 11), "{out}");
    assert!(rows[0].contains("| t/s |") && rows[0].contains("| of copy |"));
    let tests: Vec<&str> = rows[2..]
        .iter()
        .map(|r| r.split('|').nth(6).unwrap().trim())
        .collect();
    assert_eq!(tests, ["pp8", "pp16", "tg4", "pp8", "pp16"]);
    assert!(rows[4].ends_with("% |"), "{}", rows[4]);
    assert!(out.lines().any(|l| l.starts_with("copy bandwidth: ")));

    let csv = ok(bench(&m, "-p 8 -n 4 -r 2 -o csv --backend cpu"));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    let fields = lines[0].split(',').count();
    assert!(
        lines.iter().all(|l| l.split(',').count() == fields),
        "{csv}"
    );
    let avg = lines[0].split(',').position(|f| f == "avg_ts").unwrap();
    assert!(lines[1..]
        .iter()
        .all(|l| l.split(',').nth(avg).unwrap().parse::<f64>().unwrap() > 0.0));
}

#[test]
fn profile_accounts_for_every_dispatch_of_a_decode_step() {
    let m = Model::new("profile");
    let out = ok(bench(&m, "-p 0 -n 4 -r 1 --profile -o json"));
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["profile"];
    assert_eq!(num(p, "steps"), 5.0);
    let families = p["families"].as_array().unwrap();
    let matmul = |f: &&Value| {
        let name = f["family"].as_str().unwrap();
        name.starts_with("mul_mat") && name.ends_with(" q4_0")
    };
    let mm = families
        .iter()
        .find(matmul)
        .unwrap_or_else(|| panic!("{p}"));
    assert!(num(mm, "gflops") > 0.0 && num(mm, "gbps") > 0.0);
    let dispatches: f64 = families.iter().map(|f| num(f, "dispatches")).sum();
    assert_eq!(dispatches, num(p, "dispatches_per_step"));
    assert!(families.iter().all(|f| num(f, "ns") >= 0.0));
    let share: f64 = families.iter().map(|f| num(f, "share")).sum();
    assert!((share - 1.0).abs() < 1e-6, "shares sum to {share}");
    let sorted = families
        .windows(2)
        .all(|w| num(&w[0], "ns") >= num(&w[1], "ns"));
    assert!(sorted, "families are listed most expensive first");
    assert!(num(p, "cpu_encode_submit_ns") > 0.0);
    assert!(num(p, "gpu_span_ns") >= 0.0);
    // The steps timed as they run: the host waits for the GPU, so a step takes at least its
    // encoding.
    assert!(num(p, "step_gpu_span_ns") > 0.0);
    assert!(num(p, "step_wall_ns") >= num(p, "step_cpu_encode_submit_ns"));
}

/// `--profile-tokens` profiles a prompt chunk: at the GPU shapes its products run on the matrix ×
/// matrix kernels, and only the head (which reads out the last token alone) on the mat-vec; at
/// a CPU adapter's shapes every product runs on the mat-vec, 8 columns a dispatch.
#[test]
fn profile_of_a_prompt_chunk_runs_the_prefill_kernels() {
    let m = Model::new("profile-pp");
    let profile = |shapes: &str| -> Value {
        let args = format!(
            "-p 0 -n 4 -r 1 --profile --profile-steps 2 --profile-tokens 32 -o json \
             --kernel-shapes {shapes}"
        );
        let v: Value = serde_json::from_str(&ok(bench(&m, &args))).unwrap();
        v["profile"].clone()
    };
    let dispatches = |p: &Value, prefix: &str| -> f64 {
        p["families"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["family"].as_str().unwrap().starts_with(prefix))
            .map(|f| num(f, "dispatches"))
            .sum()
    };
    let p = profile("gpu");
    assert_eq!((num(&p, "steps"), num(&p, "tokens")), (2.0, 32.0));
    assert!(dispatches(&p, "mul_mat_tiled") >= 4.0, "{p}");
    assert_eq!(dispatches(&p, "mul_mat_vec"), 1.0, "{p}");
    let p = profile("cpu");
    assert_eq!(dispatches(&p, "mul_mat_tiled"), 0.0, "{p}");
    assert!(dispatches(&p, "mul_mat_vec") >= 4.0 * 4.0 + 1.0, "{p}");
    assert!(!bench(&m, "-p 0 -n 4 --profile --profile-tokens 0")
        .status
        .success());
}

#[test]
fn bad_arguments_are_errors() {
    let m = Model::new("bad");
    for args in ["-r 0", "-p 0 -n 0", "--kv-type q5_1", "-p 64 --ctx 16"] {
        let o = bench(&m, args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

/// `-d` prefills each test's cache untimed: rows per depth named as llama-bench names them, the
/// context sized for the deepest, and tg's roofline counting the cached positions.
#[test]
fn depth_rows_start_after_cached_tokens() {
    let m = Model::new("depth");
    let out = ok(bench(&m, "-p 8 -n 4 -d 0,16 -r 1 -o json --backend cpu"));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        num(&v, "n_ctx"),
        24.0,
        "the deepest test needs 16 + 8 tokens"
    );
    let results = v["results"].as_array().unwrap();
    let tests: Vec<(&str, f64)> = results
        .iter()
        .map(|r| (r["test"].as_str().unwrap(), num(r, "n_depth")))
        .collect();
    assert_eq!(
        tests,
        [
            ("pp8", 0.0),
            ("tg4", 0.0),
            ("pp8 @ d16", 16.0),
            ("tg4 @ d16", 16.0)
        ]
    );
    let (w, kv) = (
        num(&v, "weight_bytes_per_token"),
        num(&v, "kv_bytes_per_position"),
    );
    assert_eq!(num(&results[1], "bytes_per_token"), w + 2.5 * kv);
    assert_eq!(num(&results[3], "bytes_per_token"), w + 18.5 * kv);
}

/// tg across the end of a decode window (the one-token graph over the first 256 cache rows)
/// takes that step's token from the host (`Session::can_feed`) instead of failing the test, in
/// greedy and in sampled decoding.
#[test]
fn tg_crosses_a_decode_window() {
    let m = Model::new("window");
    for sample in ["", "--sample"] {
        let args = format!("-p 0 -n 4 -d 254 -r 1 -o json --backend cpu {sample}");
        let v: Value = serde_json::from_str(&ok(bench(&m, &args))).unwrap();
        assert_eq!(num(&v, "n_ctx"), 258.0, "{args}");
        assert_eq!(v["results"][0]["test"], "tg4 @ d254", "{args}");
    }
}
