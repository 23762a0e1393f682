//! Runs `wgllm synth`, `run`, `tokenize`, `pull` and `devices` as a user would, on a tiny
//! synthetic model: it generates on both backends, and every bad input gives one `error:` line and
//! a non-zero exit.

mod common;

use common::{assert_one_error_line, text, tiny, wgllm, Scratch};

#[test]
fn greedy_generation_is_identical_on_cpu_and_webgpu() {
    let s = Scratch::new("gen");
    let m = tiny(&s);
    let run = |backend: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "-m",
            &m,
            "-p",
            "hello world",
            "-n",
            "12",
            "--temp",
            "0",
            "-c",
            "64",
            "--backend",
            backend,
        ];
        args.extend(extra);
        let o = wgllm(&args, &[]);
        assert!(o.status.success(), "{backend}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("t/s"),
            "speeds on stderr: {}",
            text(&o.stderr)
        );
        (o.stdout, text(&o.stderr))
    };
    let cpu = run("cpu", &[]).0;
    assert!(!cpu.is_empty());
    let (gpu, said) = run("webgpu", &[]);
    assert_eq!(cpu, gpu, "the same tokens on both backends");
    // What the load put on the device.
    assert!(
        said.contains("MiB of weights") && said.contains("kernels compiled"),
        "{said}"
    );
    // Both workgroup shapes compute the same (auto takes the CPU shapes on lavapipe).
    for shapes in ["gpu", "cpu"] {
        let (out, _) = run("webgpu", &["--kernel-shapes", shapes]);
        assert_eq!(cpu, out, "--kernel-shapes {shapes}");
    }
    // A step submitted in many small command buffers computes the same.
    let small = run("webgpu", &["--dispatches-per-submit", "3"]).0;
    assert_eq!(cpu, small, "three dispatches per submission");
    // The kernels a browser runs: no subgroups (workgroup-memory reductions), no coop.
    let (browser, said) = run("webgpu", &["--subgroups", "off", "--coop", "off"]);
    assert!(said.contains("no subgroups"), "{said}");
    assert_eq!(cpu, browser, "without subgroups");
}

#[test]
fn tokenize_prints_one_id_per_line() {
    let s = Scratch::new("tok");
    let m = tiny(&s);
    let o = wgllm(&["tokenize", "-m", &m, "--no-special", "hi!"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The tiny model's vocabulary is one byte-level token per byte.
    assert_eq!(text(&o.stdout), "104\n105\n33\n");
}

#[test]
fn prompt_longer_than_the_context_is_one_error_line() {
    let s = Scratch::new("ctx");
    let m = tiny(&s);
    let o = wgllm(
        &[
            "run",
            "-m",
            &m,
            "-p",
            "a prompt that is far too long",
            "-c",
            "8",
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert_one_error_line(&o, "raise --ctx");
}

#[test]
fn unknown_architecture_and_corrupt_files_are_one_error_line() {
    let s = Scratch::new("bad");
    let m = tiny(&s);
    let mut bytes = std::fs::read(&m).unwrap();
    // Rename the architecture in place: "llama" -> "lxama" in the general.architecture value.
    let at = bytes.windows(5).position(|w| w == b"llama").unwrap();
    bytes[at + 1] = b'x';
    let odd = s.path("odd.gguf");
    std::fs::write(&odd, &bytes).unwrap();
    let o = wgllm(&["run", "-m", &odd, "-p", "hi", "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "supported: llama, qwen2, qwen3, qwen3moe, gemma3");

    let cut = s.path("cut.gguf");
    std::fs::write(&cut, &std::fs::read(&m).unwrap()[..4000]).unwrap();
    let o = wgllm(&["run", "-m", &cut, "-p", "hi", "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "cut.gguf");

    let o = wgllm(&["run", "-m", &s.path("missing.gguf"), "-p", "hi"], &[]);
    assert_one_error_line(&o, "is neither a file, a known model");
}

#[test]
fn a_split_model_runs_as_the_whole_file_does() {
    let s = Scratch::new("split");
    let m = tiny(&s);
    let o = wgllm(&["gguf", "split", &m, "--parts", "3"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let parts: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    assert_eq!(parts.len(), 3, "{parts:?}");
    assert!(parts[0].ends_with("tiny-00001-of-00003.gguf"), "{parts:?}");
    let run = |model: &str| {
        let args = [
            "run",
            "-m",
            model,
            "-p",
            "hello",
            "-n",
            "6",
            "--temp",
            "0",
            "--backend",
            "cpu",
        ];
        wgllm(&args, &[])
    };
    let whole = run(&m);
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    let split = run(&parts[0]);
    assert!(split.status.success(), "{}", text(&split.stderr));
    assert_eq!(whole.stdout, split.stdout);
    std::fs::remove_file(&parts[2]).unwrap();
    assert_one_error_line(&run(&parts[0]), "part 3 of 3");
    assert_one_error_line(&run(&parts[1]), "open the first, tiny-00001-of-00003.gguf");
}

#[test]
fn pull_without_an_index_or_python_is_one_error_line() {
    let s = Scratch::new("pull");
    let cache = s.path("cache");
    // Port 9 (discard) on loopback: nothing listens, the index is refused at once.
    let o = wgllm(
        &["pull", "smollm2"],
        &[
            ("PATH", "/nonexistent"),
            ("XDG_CACHE_HOME", &cache),
            ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
        ],
    );
    assert_one_error_line(&o, "python3 was not found");
    assert!(
        text(&o.stderr).contains("trying pip"),
        "{}",
        text(&o.stderr)
    );
    let o = wgllm(&["pull", "llama-9000"], &[("XDG_CACHE_HOME", &cache)]);
    assert_one_error_line(&o, "known models: smollm2, gemma3-270m");
}

#[test]
fn devices_without_any_adapter_explains_how_to_get_a_driver() {
    // Point the Vulkan loader and the EGL vendor library (wgpu's GL path) at no driver at all.
    let o = wgllm(
        &["devices"],
        &[
            ("VK_DRIVER_FILES", "/nonexistent.json"),
            ("VK_ICD_FILENAMES", "/nonexistent.json"),
            ("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent.json"),
        ],
    );
    assert_one_error_line(&o, "mesa-vulkan-drivers");
}

#[test]
fn ops_checks_kernels_and_reports_speed() {
    let o = wgllm(
        &["ops", "--filter", "MUL_MAT q4_0", "--perf", "--reps", "2"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let cases: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("MUL_MAT q4_0"))
        .collect();
    assert!(!cases.is_empty(), "{out}");
    assert!(
        cases
            .iter()
            .all(|l| l.contains(" OK ") && l.contains("GFLOP/s")),
        "{out}"
    );
    // The filter also matches fused-pattern cases (FUSED mul_mat q4_0 ...): count every case.
    let all = out.lines().filter(|l| l.contains(" OK ")).count();
    assert!(all >= cases.len(), "{out}");
    assert!(
        out.contains(&format!("{all} passed, 0 failed, 0 unsupported")),
        "{out}"
    );
}

#[test]
fn cached_models_are_listed_and_removed_unless_in_use() {
    let s = Scratch::new("cache");
    let cache = s.path("xdg");
    let env = [("XDG_CACHE_HOME", cache.as_str())];
    let o = wgllm(&["list"], &env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("no models in"),
        "{}",
        text(&o.stdout)
    );
    let file = std::path::Path::new(&cache).join("wgllm/models/hf/o/r/main/tiny.gguf");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::copy(tiny(&s), &file).unwrap();
    let o = wgllm(&["list"], &env);
    let listed = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let row = listed.lines().nth(1).unwrap_or_default();
    for want in ["hf:o/r/tiny.gguf", "llama", "q8_0", "hf"] {
        assert!(row.contains(want), "{want} in {listed}");
    }
    // A chat holding the model open: rm refuses it until the chat ends.
    let mut chat = std::process::Command::new(env!("CARGO_BIN_EXE_wgllm"))
        .args([
            "chat",
            "-m",
            file.to_str().unwrap(),
            "--backend",
            "cpu",
            "-c",
            "64",
        ])
        .env("XDG_CACHE_HOME", &cache)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !wgllm_gguf::in_use(&file).unwrap() {
        assert!(
            t0.elapsed().as_secs() < 60,
            "the chat never opened the model"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = wgllm(&["rm", "hf:o/r/tiny.gguf"], &env);
    assert_one_error_line(&o, "in use by a running wgllm");
    assert!(file.exists());
    drop(chat.stdin.take());
    assert!(chat.wait().unwrap().success());
    let o = wgllm(&["rm", "hf:o/r/tiny.gguf"], &env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("removed "),
        "{}",
        text(&o.stdout)
    );
    assert!(!file.exists());
    let o = wgllm(&["rm", "hf:o/r/tiny.gguf"], &env);
    assert_one_error_line(&o, "no cached model 'hf:o/r/tiny.gguf'");
}

#[test]
fn chat_outlives_its_context_and_saves_loads_and_clears_conversations() {
    let s = Scratch::new("chat");
    let f = wgllm_gguf::GgufFile::open(tiny(&s)).unwrap();
    let template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
                    {% if add_generation_prompt %}assistant: {% endif %}";
    let meta = (
        "tokenizer.chat_template".to_string(),
        wgllm_gguf::Value::String(template.into()),
    );
    let m = s.path("chat.gguf");
    let bytes = wgllm_gguf::GgufWriter::with_metadata(&f, [meta])
        .unwrap()
        .to_vec();
    std::fs::write(&m, bytes).unwrap();
    let conv = s.path("conv.json");
    let lines = [
        "the first message of this chat".to_string(),
        "a second message to fill it".into(),
        "a third one, so the first goes".into(),
        format!("/save {conv}"),
        "/clear".into(),
        format!("/load {conv}"),
        "/bogus".into(),
        "x".repeat(200),
        "a last short one".into(),
    ];
    let mut chat = std::process::Command::new(env!("CARGO_BIN_EXE_wgllm"))
        .args(["chat", "-m", &m, "--backend", "cpu", "-c", "160", "-n", "6"])
        .args(["--temp", "0", "--system", "be brief"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, (lines.join("\n") + "\n").as_bytes()).unwrap();
    drop(stdin);
    let o = chat.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("[context full (160 tokens): dropped the"),
        "{err}"
    );
    assert!(err.contains("[conversation cleared]"), "{err}");
    assert!(err.contains("error: unknown command /bogus"), "{err}");
    assert!(err.contains("for the answer: not sent"), "{err}");
    // Four answers: the three turns before the commands and the last one.
    assert_eq!(err.matches(" t/s]").count(), 4, "{err}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&conv).unwrap()).unwrap();
    let saved = saved.as_array().unwrap();
    assert_eq!(
        saved[0]["role"], "system",
        "the system message stays: {saved:?}"
    );
    assert_eq!(saved.last().unwrap()["role"], "assistant");
    assert!(
        !saved
            .iter()
            .any(|m| m["content"] == "the first message of this chat"),
        "the oldest turn was dropped: {saved:?}"
    );
    assert!(
        err.contains(&format!("[loaded {} messages from {conv}]", saved.len())),
        "{err}"
    );
}
