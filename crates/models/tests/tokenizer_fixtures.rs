//! The tokenizer against reference ids for real models, written by
//! `scripts/gen_tokenizer_fixtures.py` (Hugging Face `tokenizers`/`transformers` for SmolLM2,
//! Google's `sentencepiece` for Gemma 3, with llama.cpp's BOS and special-token conventions).
//!
//! These need the model files, which CI does not have, so they are ignored by default. Run
//! `wgllm pull smollm2` and `wgllm pull gemma3-270m`, then
//! `cargo test -p wgllm-models -- --ignored`.

use std::path::PathBuf;

use serde_json::Value as Json;
use wgllm_gguf::GgufFile;
use wgllm_models::config::model_cache_dir;
use wgllm_models::tokenizer::{ChatMessage, TokenType, Tokenizer};

fn fixture(name: &str) -> Json {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizer")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn tokenizer(file: &str, pull: &str) -> Tokenizer {
    let path = model_cache_dir().join(file);
    assert!(
        path.exists(),
        "{} is missing: run `wgllm pull {pull}` first",
        path.display()
    );
    let gguf = GgufFile::open(&path).unwrap();
    Tokenizer::from_gguf(&gguf).unwrap()
}

fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as u32)
        .collect()
}

/// Every fixture text encodes to exactly the reference ids; texts without control tokens decode
/// back to themselves, and streaming decode agrees with whole decode.
fn check_cases(tok: &Tokenizer, fx: &Json) {
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tok.encode(text, true).unwrap();
        if got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n   got {got:?}"));
            continue;
        }
        let plain = tok.encode(text, false).unwrap();
        let mut stream = tok.stream_decoder();
        let streamed: String =
            plain.iter().map(|&id| stream.push(id)).collect::<String>() + &stream.finish();
        assert_eq!(
            streamed,
            tok.decode(&plain),
            "stream vs whole decode of {text:?}"
        );
        if plain
            .iter()
            .all(|&id| tok.token_type(id) != TokenType::Control)
        {
            assert_eq!(tok.decode(&plain), text, "round trip of {text:?}");
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} texts differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn messages(v: &Json) -> Vec<ChatMessage> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

/// SmolLM2-135M-Instruct: byte-level BPE, `smollm` pre-tokenizer, ChatML template.
#[test]
#[ignore = "needs the model: `wgllm pull smollm2`"]
fn smollm2_matches_reference() {
    let tok = tokenizer("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2");
    let fx = fixture("smollm2.json");
    check_cases(&tok, &fx);
    let msgs = messages(&fx["chat"]["messages"]);
    assert_eq!(
        tok.render_chat(&msgs, true).unwrap(),
        fx["chat"]["with_generation_prompt"].as_str().unwrap()
    );
    assert_eq!(
        tok.render_chat(&msgs[..2], false).unwrap(),
        fx["chat"]["without_generation_prompt"].as_str().unwrap()
    );
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(!tok.adds_bos());
    // <|endoftext|>, <|im_end|> (EOS), and <reponame>, which llama.cpp takes for a FIM token.
    assert_eq!(tok.eog_tokens().collect::<Vec<_>>(), [0, 2, 4]);
    assert_eq!(tok.token_str(1), Some("<|im_start|>"));
}

/// Gemma 3 270M: SentencePiece with byte fallback, BOS added, no chat template in the file (the
/// built-in Gemma turn format is used).
#[test]
#[ignore = "needs the model: `wgllm pull gemma3-270m`"]
fn gemma3_matches_reference() {
    let tok = tokenizer("gemma-3-270m-q4_k_m.gguf", "gemma3-270m");
    let fx = fixture("gemma3.json");
    check_cases(&tok, &fx);
    assert!(fx["chat"].is_null());
    let rendered = tok
        .render_chat(&[ChatMessage::new("user", " hi ")], true)
        .unwrap();
    assert_eq!(
        rendered,
        "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    );
    // The reference's chat prompt, rendered with the same template, tokenizes to its ids.
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/reference/gemma3.json")).unwrap();
    let chat = &reference["prompts"][1];
    let q = "What is the capital of France? Answer in one sentence.";
    let text = tok
        .render_chat(&[ChatMessage::new("user", q)], true)
        .unwrap();
    let ids = tok.encode_with(&text, false, true).unwrap();
    let want: Vec<u32> = chat["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, want);
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!((tok.bos(), tok.eos()), (Some(2), Some(1)));
    assert!(tok.adds_bos());
    assert!(tok.is_eog(1) && tok.is_eog(106) && !tok.is_eog(105));
    assert_eq!(tok.token_str(106), Some("<end_of_turn>"));
}
