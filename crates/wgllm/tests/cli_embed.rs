//! Runs `wgllm embed`, `convert` and `bench` on embedding models as a user would: a synthetic
//! BERT, and a tiny Hugging Face checkpoint written here (config.json, model.safetensors,
//! tokenizer.json) converted to GGUF; bad input gives one `error:` line and a non-zero exit.

mod common;

use common::{assert_one_error_line, text, tiny, wgllm, Scratch};
use serde_json::{json, Value};

fn tiny_bert(s: &Scratch) -> String {
    let path = s.path("bert.gguf");
    let o = wgllm(
        &[
            "synth",
            "--preset",
            "bert-tiny",
            "--dtype",
            "f32",
            "-o",
            &path,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    path
}

fn rows(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn norm(v: &Value) -> f64 {
    let a = v.as_array().unwrap();
    a.iter()
        .map(|x| x.as_f64().unwrap().powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn embed_prints_one_array_per_input_on_both_backends() {
    let s = Scratch::new("embed");
    let m = tiny_bert(&s);
    let file = s.path("texts.txt");
    std::fs::write(&file, "first line\n\nsecond line\n").unwrap();
    let run = |backend: &str| {
        let o = wgllm(
            &[
                "embed",
                "-m",
                &m,
                "hello",
                "-f",
                &file,
                "--normalize",
                "--backend",
                backend,
            ],
            &[],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("3 inputs"), "{}", text(&o.stderr));
        rows(&o.stdout)
    };
    let cpu = run("cpu");
    assert_eq!(cpu.len(), 3, "the text and two non-empty lines");
    for r in &cpu {
        assert_eq!(r.as_array().unwrap().len(), 64);
        assert!((norm(r) - 1.0).abs() < 1e-5);
    }
    let gpu = run("webgpu");
    for (c, g) in cpu.iter().zip(&gpu) {
        let dot: f64 = c
            .as_array()
            .unwrap()
            .iter()
            .zip(g.as_array().unwrap())
            .map(|(a, b)| a.as_f64().unwrap() * b.as_f64().unwrap())
            .sum();
        assert!(dot > 0.99999, "cpu and webgpu agree: {dot}");
    }
    // One vector per token without pooling: [CLS] h i [SEP].
    let o = wgllm(
        &[
            "embed",
            "-m",
            &m,
            "hi",
            "--pooling",
            "none",
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let tokens = rows(&o.stdout);
    assert_eq!(tokens[0].as_array().unwrap().len(), 4);
}

#[test]
fn embed_refuses_bad_input_in_one_line() {
    let s = Scratch::new("embed-bad");
    let m = tiny_bert(&s);
    let long = "word ".repeat(100);
    let o = wgllm(&["embed", "-m", &m, &long, "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "--truncate cuts it");
    let o = wgllm(
        &["embed", "-m", &m, &long, "--truncate", "--backend", "cpu"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = wgllm(&["embed", "-m", &m, "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "nothing to embed");
    let llama = tiny(&s);
    let o = wgllm(&["embed", "-m", &llama, "hi", "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "as an embedding model");
    let o = wgllm(&["run", "-m", &m, "-p", "hi", "--backend", "cpu"], &[]);
    assert_one_error_line(&o, "is an embedding model");
}

#[test]
fn bench_times_an_embedding_model() {
    let s = Scratch::new("embed-bench");
    let m = tiny_bert(&s);
    let o = wgllm(
        &[
            "bench",
            "-m",
            &m,
            "-p",
            "8,16",
            "--batch",
            "1,4",
            "-r",
            "1",
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let table = text(&o.stdout);
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| 4 |")).count(),
        2,
        "{table}"
    );
}

/// A safetensors file of f32 tensors (its header, then the data in order).
fn safetensors(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape, values) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            name.to_string(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let h = serde_json::to_vec(&Value::Object(header)).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

/// A 1-layer BERT checkpoint of width 8 and a 12-token vocabulary, as Hugging Face saves it.
fn write_checkpoint(dir: &std::path::Path, extra: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    let (e, ff, v, pos) = (8usize, 16usize, 12usize, 16usize);
    let vals = |n: usize, k: f32| {
        (0..n)
            .map(|i| ((i as f32 * k).sin()) * 0.5)
            .collect::<Vec<_>>()
    };
    let mut t: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![v, e],
            vals(v * e, 0.3),
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![pos, e],
            vals(pos * e, 0.7),
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, e],
            vals(2 * e, 1.1),
        ),
        ("embeddings.LayerNorm.weight".into(), vec![e], vec![1.0; e]),
        ("embeddings.LayerNorm.bias".into(), vec![e], vec![0.0; e]),
    ];
    let p = "encoder.layer.0.";
    for (name, rows, cols) in [
        ("attention.self.query", e, e),
        ("attention.self.key", e, e),
        ("attention.self.value", e, e),
        ("attention.output.dense", e, e),
        ("intermediate.dense", ff, e),
        ("output.dense", e, ff),
    ] {
        t.push((
            format!("{p}{name}.weight"),
            vec![rows, cols],
            vals(rows * cols, 0.13),
        ));
        t.push((format!("{p}{name}.bias"), vec![rows], vals(rows, 0.5)));
    }
    for name in ["attention.output.LayerNorm", "output.LayerNorm"] {
        t.push((format!("{p}{name}.weight"), vec![e], vec![1.0; e]));
        t.push((format!("{p}{name}.bias"), vec![e], vec![0.0; e]));
    }
    if let Some(name) = extra {
        t.push((name.into(), vec![e], vec![0.0; e]));
    }
    let refs: Vec<(&str, Vec<usize>, Vec<f32>)> = t
        .iter()
        .map(|(n, s, v)| (n.as_str(), s.clone(), v.clone()))
        .collect();
    std::fs::write(dir.join("model.safetensors"), safetensors(&refs)).unwrap();
    let config = json!({
        "architectures": ["BertModel"], "hidden_size": e, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": ff, "max_position_embeddings": pos,
        "vocab_size": v, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
        "position_embedding_type": "absolute"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let words = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "a", ",", "!",
        "##ing",
    ];
    let vocab: serde_json::Map<String, Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    let added: Vec<Value> = (0..5)
        .map(|i| json!({"id": i, "content": words[i], "special": true}))
        .collect();
    let tok = json!({
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "lowercase": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": vocab}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
}

#[test]
fn convert_writes_a_gguf_that_embeds_and_names_what_it_cannot_convert() {
    let s = Scratch::new("convert");
    let dir = std::path::PathBuf::from(s.path("ckpt"));
    write_checkpoint(&dir, None);
    for dtype in ["f32", "f16", "q8_0"] {
        let out = s.path(&format!("m-{dtype}.gguf"));
        let o = wgllm(
            &[
                "convert",
                dir.to_str().unwrap(),
                "-o",
                &out,
                "--type",
                dtype,
            ],
            &[],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("bert (21 tensors"),
            "{}",
            text(&o.stdout)
        );
        let o = wgllm(&["tokenize", "-m", &out, "Hello worlds, a world!"], &[]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let ids: Vec<&str> = text(&o.stdout).leak().lines().collect();
        assert_eq!(
            ids,
            ["2", "5", "6", "7", "9", "8", "6", "10", "3"],
            "{dtype}"
        );
        let o = wgllm(
            &["embed", "-m", &out, "hello world", "--backend", "cpu"],
            &[],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(rows(&o.stdout)[0].as_array().unwrap().len(), 8);
    }
    let out = s.path("bad.gguf");
    let bad = std::path::PathBuf::from(s.path("extra"));
    write_checkpoint(&bad, Some("encoder.layer.0.crossattention.bias"));
    let o = wgllm(&["convert", bad.to_str().unwrap(), "-o", &out], &[]);
    assert_one_error_line(
        &o,
        "tensor 'encoder.layer.0.crossattention.bias' is not part of any model",
    );
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["GPT2LMHeadModel"]}"#,
    )
    .unwrap();
    let o = wgllm(&["convert", dir.to_str().unwrap(), "-o", &out], &[]);
    assert_one_error_line(&o, "unknown architecture GPT2LMHeadModel");
    let o = wgllm(
        &["convert", dir.to_str().unwrap(), "-o", &out, "--type", "q9"],
        &[],
    );
    assert_one_error_line(&o, "unknown weight type 'q9'");
    let o = wgllm(&["convert", s.path("nowhere").as_str(), "-o", &out], &[]);
    assert_one_error_line(&o, "config.json");
}
