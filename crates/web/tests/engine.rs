//! The browser engine run natively: the CPU reference and WebGPU (lavapipe in CI) produce the
//! same greedy text for a synthetic model (the op table itself runs natively in
//! `wgllm-webgpu`'s tests), and so does a model streamed to the GPU in chunks of any size;
//! bad streams are clear errors; a prompt sharing a prefix with the last runs only the rest. SmolLM2 streamed from disk in 64 KiB chunks gives the
//! whole-file greedy text (`cargo test -p wgllm-web --test engine -- --ignored smollm2`, in
//! `.ci/run`'s real-model stage).

mod common;

use wgllm_core::DType;
use wgllm_gguf::Value;
use wgllm_models::config::model_cache_dir;
use wgllm_models::sampler::SamplerConfig;
use wgllm_structured::Grammar;
use wgllm_web::{Device, Engine, EngineConfig, WebError};

#[test]
fn synthetic_model_greedy_text_is_the_same_on_webgpu_and_cpu() {
    let cpu = pollster::block_on(common::greedy(Device::Cpu, 12));
    let gpu = pollster::block_on(common::greedy(Device::WebGpu, 12));
    assert_eq!(cpu.1, 12, "the CPU run stopped early: {cpu:?}");
    assert_eq!(gpu, cpu);
}

/// The browser engine's Whisper path: the same greedy transcript on the CPU reference and on
/// WebGPU, which the browser test pins too ([`common::NATIVE_WHISPER_JSON`]).
#[test]
fn synthetic_whisper_transcript_is_the_same_on_webgpu_and_cpu() {
    let (cpu, summary) = pollster::block_on(common::transcript(Device::Cpu));
    let (gpu, _) = pollster::block_on(common::transcript(Device::WebGpu));
    println!("{summary}\n{cpu}");
    let tokens = |j: &str| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(j).unwrap();
        v["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tokens"].clone())
            .collect()
    };
    assert_eq!(tokens(&gpu), tokens(&cpu));
    assert_eq!(tokens(&cpu), tokens(common::NATIVE_WHISPER_JSON));
    // A text request to a speech model, and a transcription with a text model, name the kind.
    let mut e = pollster::block_on(common::engine(Device::Cpu));
    e.load(common::synth_whisper().into()).unwrap();
    let err = e.prompt_ids("hi", false).unwrap_err().to_string();
    assert!(err.contains("Whisper speech model"), "{err}");
    e.load(common::synth_model().into()).unwrap();
    let err = pollster::block_on(e.transcribe(
        common::test_wav(),
        None,
        "auto",
        false,
        "json",
        false,
        |_| {},
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("not a Whisper model"), "{err}");
}

#[test]
fn engine_reports_missing_model_and_bad_files() {
    let mut e = pollster::block_on(Engine::open(Device::Cpu, EngineConfig::default())).unwrap();
    assert!(e.prompt_ids("hi", false).is_err());
    let err = e.load(b"GGUF but not really".to_vec().into()).unwrap_err();
    assert!(matches!(err, wgllm_web::WebError::Gguf(_)), "{err}");
    assert!(e.model_summary().is_none());
}

/// A conversation longer than the context is an error saying to start a new one; the engine
/// answers the next prompt that fits, still keeping the part the refused one shared.
#[test]
fn a_full_context_says_to_start_a_new_conversation() {
    let mut e = pollster::block_on(common::engine(Device::Cpu));
    e.load(common::synth_model().into()).unwrap();
    let ids = |e: &Engine, text: &str| e.prompt_ids(text, false).unwrap();
    let greedy = |e: &mut Engine, prompt: &[u32], n| {
        pollster::block_on(e.generate(prompt, n, SamplerConfig::greedy(), None, |_| true))
    };
    let bos = ids(&e, "").len();
    let hello = ids(&e, "Hello");
    greedy(&mut e, &hello, 4).unwrap();
    let long = ids(&e, &format!("Hello{}", "a".repeat(60)));
    let msg = greedy(&mut e, &long, 10).unwrap_err().to_string();
    assert!(
        msg.contains("context holds 64: start a new conversation"),
        "{msg}"
    );
    let world = ids(&e, "Hello, world");
    greedy(&mut e, &world, 4).unwrap();
    assert_eq!(e.reused_tokens(), bos + "Hello".len());
}

#[test]
fn synthetic_model_greedy_text_is_pinned() {
    let cpu = pollster::block_on(common::greedy(Device::Cpu, 12));
    assert_eq!(cpu.0, common::NATIVE_GREEDY_TEXT, "{:?}", cpu.0);
}

/// Streams `bytes` into `e` in chunks of the sizes `sizes` cycles through; returns the summary.
fn stream_in(
    e: &mut Engine,
    bytes: &[u8],
    total: Option<u64>,
    sizes: &[usize],
) -> Result<String, WebError> {
    e.begin_stream(total, None)?;
    let mut at = 0;
    for &n in sizes.iter().cycle() {
        if at == bytes.len() {
            break;
        }
        let end = (at + n).min(bytes.len());
        e.feed(&bytes[at..end])?;
        at = end;
    }
    e.finish_stream()
}

#[test]
fn a_streamed_load_on_webgpu_gives_the_whole_file_greedy_text() {
    let model = common::synth_model();
    let len = model.len() as u64;
    let mut whole = pollster::block_on(common::engine(Device::WebGpu));
    let summary = whole.load(model.clone().into()).unwrap();
    let want = pollster::block_on(common::greedy_loaded(&mut whole, 12));
    assert_eq!(want.1, 12, "{want:?}");
    let mut e = pollster::block_on(common::engine(Device::WebGpu));
    let cases: [(Option<u64>, &[usize]); 4] = [
        (Some(len), &[1]),
        (None, &[61, 7, 4099]),
        (Some(len), &[65_536]),
        (None, &[model.len()]),
    ];
    let mut resident = None;
    for (total, sizes) in cases {
        let s = stream_in(&mut e, &model, total, sizes).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(s, summary, "chunks of {sizes:?}");
        // Every tensor is on the device, once: a new load replaces the last one's weights.
        let bytes = e.resident_bytes();
        assert!(bytes as f64 > 0.9 * len as f64, "{bytes} of {len}");
        assert_eq!(*resident.get_or_insert(bytes), bytes);
        let got = pollster::block_on(common::greedy_loaded(&mut e, 12));
        assert_eq!(got, want, "chunks of {sizes:?}");
    }
}

#[test]
fn a_streamed_load_on_the_cpu_collects_the_file() {
    let model = common::synth_model();
    let mut e = pollster::block_on(common::engine(Device::Cpu));
    stream_in(&mut e, &model, Some(model.len() as u64), &[999]).unwrap();
    let got = pollster::block_on(common::greedy_loaded(&mut e, 12));
    assert_eq!(got.0, common::NATIVE_GREEDY_TEXT);
    let e2 = stream_in(&mut e, &model, Some(model.len() as u64 + 1), &[999]).unwrap_err();
    assert!(e2.to_string().contains("but announced"), "{e2}");
    assert!(e.model_summary().is_none());
}

#[test]
fn bad_streams_are_clear_errors_and_leave_nothing_loaded() {
    let model = common::synth_model();
    let len = model.len() as u64;
    let file = wgllm_gguf::GgufFile::from_bytes(model.clone().into()).unwrap();
    let header_end = file.data_offset() as usize;
    // Inside the last tensor (the file may end in padding).
    let data_end = file.tensors().iter().map(|t| t.offset() + t.size()).max();
    let cut = header_end + data_end.unwrap() as usize - 3;
    let mut e = pollster::block_on(common::engine(Device::WebGpu));
    let cases: [(&[u8], Option<u64>, &str); 5] = [
        (&model[..header_end / 2], None, "truncated file"),
        (
            &model[..header_end / 2],
            Some(len),
            &format!(
                "the stream gave {} bytes, but announced {len}",
                header_end / 2
            ),
        ),
        (&model[..cut], None, "reaches past the end of the file"),
        (&model[..cut], Some(len), "but announced"),
        (b"GGML not a model", None, "bad magic"),
    ];
    for (bytes, total, fragment) in cases {
        stream_in(&mut e, &model, None, &[4096]).unwrap();
        let err = stream_in(&mut e, bytes, total, &[1000])
            .unwrap_err()
            .to_string();
        assert!(err.contains(fragment), "{err:?} lacks {fragment:?}");
        assert!(e.model_summary().is_none(), "{fragment}");
        assert_eq!(
            e.resident_bytes(),
            0,
            "{fragment}: the failed load freed its uploads"
        );
        assert!(matches!(e.feed(b"more"), Err(WebError::NoStream)));
    }
    assert!(matches!(e.finish_stream(), Err(WebError::NoStream)));
}

/// Lower-case hex sha256 of `bytes`.
fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_streamed_load_checks_the_expected_sha256_before_building_the_model() {
    let model = common::synth_model();
    let good = sha256(&model);
    for dev in [Device::WebGpu, Device::Cpu] {
        let mut e = pollster::block_on(common::engine(dev));
        let feed_all = |e: &mut Engine, sha: &str| -> Result<String, WebError> {
            e.begin_stream(Some(model.len() as u64), Some(sha))?;
            for piece in model.chunks(3000) {
                e.feed(piece)?;
            }
            e.finish_stream()
        };
        // Upper-case digits are the same hash.
        let summary = feed_all(&mut e, &good.to_uppercase()).unwrap();
        assert_eq!(e.model_summary(), Some(summary.as_str()));
        assert_eq!(e.model_kind(), Some("chat"));
        let mut wrong = good.clone().into_bytes();
        wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
        let wrong = String::from_utf8(wrong).unwrap();
        let err = feed_all(&mut e, &wrong).unwrap_err();
        assert!(
            matches!(&err, WebError::Checksum { expected, got } if *expected == wrong && *got == good),
            "{err}"
        );
        assert!(err.to_string().contains(&good), "{err}");
        assert!(e.model_summary().is_none(), "a wrong file is not loaded");
        assert_eq!(e.model_kind(), None);
        assert_eq!(e.resident_bytes(), 0, "the wrong file's uploads are freed");
        let err = feed_all(&mut e, "abc").unwrap_err();
        assert!(matches!(err, WebError::BadChecksum(_)), "{err}");
        // A right hash after a wrong one loads again.
        feed_all(&mut e, &good).unwrap();
    }
}

/// Greedy text of the synthetic model under `grammar`, and how it stopped.
fn constrained(e: &mut Engine, grammar: &Grammar) -> Result<(String, String), WebError> {
    let ids = e.prompt_ids("Hello, browser", false).unwrap();
    let mut text = String::new();
    let stats =
        pollster::block_on(
            e.generate(&ids, 200, SamplerConfig::greedy(), Some(grammar), |t| {
                text.push_str(t);
                true
            }),
        )?;
    Ok((text, format!("{:?}", stats.stop)))
}

#[test]
fn a_reply_held_to_a_json_schema_is_that_json_on_webgpu_and_cpu() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["answer", "n"],
        "additionalProperties": false,
    });
    let mut replies = Vec::new();
    for dev in [Device::Cpu, Device::WebGpu] {
        let mut e = pollster::block_on(common::engine(dev));
        e.set_context_length(256).unwrap();
        e.load(common::synth_model().into()).unwrap();
        let (text, stop) = constrained(&mut e, &Grammar::JsonSchema(schema.clone())).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|err| panic!("{text:?}: {err}"));
        assert!(
            ["yes", "no"].contains(&v["answer"].as_str().unwrap()),
            "{v}"
        );
        assert!(v["n"].as_u64().unwrap() <= 9, "{v}");
        assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
        assert_eq!(stop, "EndOfGeneration", "the grammar completed the reply");
        // Any JSON object, then free text again: the engine stays usable between them.
        let (obj, _) = constrained(&mut e, &Grammar::JsonObject).unwrap();
        assert!(obj.trim_start().starts_with('{'), "{obj:?}");
        // A schema that is no schema is refused before anything runs.
        let err = constrained(&mut e, &Grammar::JsonSchema(serde_json::json!(5))).unwrap_err();
        assert!(matches!(err, WebError::Structured(_)), "{err}");
        let (free, _, _) = pollster::block_on(common::greedy_loaded(&mut e, 6));
        assert!(!free.is_empty());
        replies.push(text);
    }
    assert_eq!(
        replies[0], replies[1],
        "WebGPU's constrained greedy reply is the CPU's"
    );
}

#[test]
fn the_context_length_applies_to_the_next_load() {
    let model = common::synth_model();
    let mut e = pollster::block_on(common::engine(Device::Cpu));
    assert!(matches!(
        e.set_context_length(0),
        Err(WebError::BadContext { asked: 0, .. })
    ));
    assert!(e
        .set_context_length(wgllm_web::engine::MAX_CTX + 1)
        .is_err());
    e.set_context_length(96).unwrap();
    let summary = e.load(model.into()).unwrap();
    assert!(summary.contains("context 96"), "{summary}");
}

#[test]
fn an_unusable_model_is_refused_when_its_header_is_in() {
    let mut w = wgllm_gguf::GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("gpt2".into()))
        .unwrap()
        .add_tensor("big", DType::F32, &[1 << 16], vec![0; 1 << 18])
        .unwrap();
    let file = w.to_vec();
    let mut e = pollster::block_on(common::engine(Device::WebGpu));
    e.begin_stream(Some(file.len() as u64), None).unwrap();
    // The header and the first kilobyte of data: refused then, nothing uploaded.
    let header_end = file.len() - (1 << 18);
    let err = e.feed(&file[..header_end + 1024]).unwrap_err().to_string();
    assert!(err.contains("gpt2"), "{err}");
    assert_eq!(e.resident_bytes(), 0);
}

/// Greedy text of `max_tokens` after a raw prompt on a loaded engine.
fn raw_greedy(e: &mut Engine, prompt: &str, max_tokens: usize) -> (String, usize) {
    let ids = e.prompt_ids(prompt, false).unwrap();
    let mut text = String::new();
    let stats =
        pollster::block_on(
            e.generate(&ids, max_tokens, SamplerConfig::greedy(), None, |t| {
                text.push_str(t);
                true
            }),
        )
        .unwrap();
    (text, stats.generated_tokens)
}

/// Greedy text of 6 tokens after a raw prompt, the prompt tokens that ran, the tokens made.
fn ran(e: &mut Engine, prompt: &[u32]) -> (String, usize, Vec<u32>) {
    let mut text = String::new();
    let stats = pollster::block_on(e.generate(prompt, 6, SamplerConfig::greedy(), None, |t| {
        text.push_str(t);
        true
    }))
    .unwrap();
    (text, stats.prompt_tokens, stats.tokens)
}

/// A prompt runs only what it does not share with the tokens the cache holds from the last
/// generation (a conversation's earlier turns: the prompt, and the answer but its last token,
/// never evaluated), and answers what a fresh engine answers: the last prompt and answer then
/// more, one sharing a shorter prefix, the same prompt again (its last token runs, for its
/// logits).
#[test]
fn a_prompt_runs_only_what_the_last_one_does_not_share() {
    for device in [Device::Cpu, Device::WebGpu] {
        let loaded = || {
            let mut e = pollster::block_on(common::engine(device));
            e.load(common::synth_model().into()).unwrap();
            e
        };
        let mut e = loaded();
        let ids = |e: &Engine, text: &str| e.prompt_ids(text, false).unwrap();
        // One token a byte, after any BOS.
        let bos = ids(&e, "").len();
        let first = ids(&e, "Hello, browser");
        let (_, n, answer) = ran(&mut e, &first);
        assert_eq!((n, answer.len()), (first.len(), 6), "{answer:?}");
        let turn = [&first, &answer, &ids(&e, ", more")[bos..]].concat();
        let world = ids(&e, "Hello, world");
        // (prompt, the tokens of it the cache holds)
        let cases = [
            (turn, first.len() + 5),
            (world.clone(), bos + "Hello, ".len()),
            (world.clone(), world.len() - 1),
        ];
        for (prompt, kept) in cases {
            let (got, n, _) = ran(&mut e, &prompt);
            assert_eq!(n, prompt.len() - kept, "{prompt:?} ({device:?})");
            assert_eq!(e.reused_tokens(), kept);
            let (want, all, _) = ran(&mut loaded(), &prompt);
            assert_eq!(all, prompt.len());
            assert_eq!(got, want, "{prompt:?} ({device:?})");
        }
    }
}

#[test]
#[ignore = "needs SmolLM2 in the model cache (wgllm pull smollm2)"]
fn smollm2_streamed_to_webgpu_gives_the_whole_file_greedy_text() {
    use std::io::Read;
    let path = model_cache_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let len = std::fs::metadata(&path).unwrap().len();
    let config = EngineConfig {
        n_ctx: 32,
        ubatch: 8,
    };
    let prompt = "The capital of France is";
    let mut e = pollster::block_on(Engine::open(Device::WebGpu, config)).unwrap();
    // Read in the browser's chunk size: the file is never whole in memory here.
    e.begin_stream(Some(len), None).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let mut chunk = vec![0u8; 65_536];
    loop {
        let n = f.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        e.feed(&chunk[..n]).unwrap();
    }
    let summary = e.finish_stream().unwrap();
    let streamed = raw_greedy(&mut e, prompt, 4);
    drop(e);
    let mut whole = pollster::block_on(Engine::open(Device::WebGpu, config)).unwrap();
    assert_eq!(
        whole.load(std::fs::read(&path).unwrap().into()).unwrap(),
        summary
    );
    let want = raw_greedy(&mut whole, prompt, 4);
    assert_eq!(want.1, 4, "{want:?}");
    assert!(want.0.contains("Paris"), "{want:?}");
    assert_eq!(streamed, want);
}

#[test]
fn an_embedding_model_embeds_alike_on_webgpu_and_cpu_and_refuses_to_generate() {
    let cpu = pollster::block_on(common::embeddings(Device::Cpu));
    let gpu = pollster::block_on(common::embeddings(Device::WebGpu));
    assert_eq!(cpu.len(), common::EMBED_TEXTS.len());
    for (c, g) in cpu.iter().zip(&gpu) {
        assert_eq!(c.len(), 64);
        assert!(
            wgllm_models::embed::cosine(c, g) > 0.99999,
            "{}",
            wgllm_models::embed::cosine(c, g)
        );
    }
    let mut e = pollster::block_on(common::engine(Device::Cpu));
    e.load(common::synth_bert().into()).unwrap();
    let err = e.prompt_ids("hi", false).unwrap_err();
    assert!(matches!(err, WebError::NotGenerating), "{err}");
    let long = vec!["word ".repeat(40)];
    let err = pollster::block_on(e.embed(&long, true, false)).unwrap_err();
    assert!(err.to_string().contains("tokens"), "{err}");
    let cut = pollster::block_on(e.embed(&long, true, true)).unwrap();
    assert_eq!(cut[0].len(), 64);
    e.load(common::synth_model().into()).unwrap();
    let err = pollster::block_on(e.embed(&["hi".into()], true, false)).unwrap_err();
    assert!(matches!(err, WebError::NotEmbedding), "{err}");
}

#[test]
fn an_embedding_model_streamed_to_the_gpu_embeds_as_loaded_whole() {
    let want = pollster::block_on(common::embeddings(Device::Cpu));
    let model = common::synth_bert();
    let mut e = pollster::block_on(common::engine(Device::WebGpu));
    e.begin_stream(Some(model.len() as u64), None).unwrap();
    for chunk in model.chunks(777) {
        e.feed(chunk).unwrap();
    }
    let summary = e.finish_stream().unwrap();
    assert!(summary.contains("bert embeddings"), "{summary}");
    let texts: Vec<String> = common::EMBED_TEXTS.iter().map(|t| t.to_string()).collect();
    let got = pollster::block_on(e.embed(&texts, true, false)).unwrap();
    for (w, g) in want.iter().zip(&got) {
        assert!(wgllm_models::embed::cosine(w, g) > 0.99999);
    }
}
