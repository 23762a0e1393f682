//! Constraints on a real vocabulary (the synthetic models' byte-level one: 256 byte tokens,
//! placeholders, EOS): random logits, masked, always give output in the grammar's language.

use std::sync::Arc;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use wgllm_core::DType;
use wgllm_gguf::GgufFile;
use wgllm_models::synth::{llama_gguf, LlamaShape};
use wgllm_models::tokenizer::Tokenizer;
use wgllm_structured::{Grammar, Grammars, StructuredError};

fn tokenizer() -> Arc<Tokenizer> {
    let f = GgufFile::from_bytes(Bytes::from(
        llama_gguf(&LlamaShape::TINY, DType::F32, 1).unwrap(),
    ))
    .unwrap();
    Arc::new(Tokenizer::from_gguf(&f).unwrap())
}

/// Generates from random logits (seeded) under `grammar`, `limit` tokens at most; the text and
/// whether the grammar ended it (rather than the limit).
fn generate(g: &Grammars, tok: &Tokenizer, grammar: &Grammar, seed: u64) -> (String, bool) {
    let mut c = g.compile(grammar).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ids = Vec::new();
    for _ in 0..400 {
        // Padded like a model's output row: ids past the vocabulary must be masked too.
        let mut logits: Vec<f32> = (0..tok.vocab_size() + 20).map(|_| rng.random()).collect();
        // Some tokens already out of the running, as a sampler's filters leave them; where
        // that leaves the grammar none, both ways of masking say so.
        let mut cut = logits.clone();
        cut.iter_mut()
            .step_by(7)
            .for_each(|l| *l = f32::NEG_INFINITY);
        match c.argmax(&cut) {
            Ok(_) => logits = cut,
            Err(_) => assert!(c.apply(&mut cut).is_err()),
        }
        let greedy = c.argmax(&logits).unwrap();
        c.apply(&mut logits).unwrap();
        let id = wgllm_models::sampler::argmax(&logits);
        assert!(logits[id as usize].is_finite());
        assert_eq!(
            greedy, id,
            "the masked argmax read in place is the applied mask's"
        );
        let done = c.accept(id).unwrap();
        if tok.is_eog(id) {
            return (tok.decode(&ids), true);
        }
        ids.push(id);
        if done {
            return (tok.decode(&ids), true);
        }
    }
    (tok.decode(&ids), false)
}

#[test]
fn json_schema_output_validates() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "color": {"enum": ["red", "green"]},
            "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
        },
        "required": ["name", "age", "color", "tags"],
        "additionalProperties": false
    });
    for seed in 0..20 {
        let (text, ended) = generate(&g, &tok, &Grammar::JsonSchema(schema.clone()), seed);
        assert!(ended, "seed {seed}: {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 4, "{text}");
        assert!(o["name"].as_str().unwrap().chars().count() <= 8, "{text}");
        assert!((0..=150).contains(&o["age"].as_i64().unwrap()), "{text}");
        assert!(
            ["red", "green"].contains(&o["color"].as_str().unwrap()),
            "{text}"
        );
        let tags = o["tags"].as_array().unwrap();
        assert!(
            tags.len() <= 3 && tags.iter().all(Value::is_boolean),
            "{text}"
        );
    }
}

#[test]
fn gbnf_output_is_in_the_language() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let gbnf = r#"
        root ::= expr
        expr ::= term ([-+*/] term){0,4}
        term ::= [0-9]{1,3} | "(" expr ")"
    "#;
    for seed in 0..20 {
        let (text, ended) = generate(&g, &tok, &Grammar::Gbnf(gbnf.into()), seed);
        assert!(ended, "{text:?}");
        assert!(!text.is_empty());
        assert!(
            text.chars()
                .all(|c| c.is_ascii_digit() || "+-*/()".contains(c)),
            "{text:?}"
        );
        assert_eq!(
            text.matches('(').count(),
            text.matches(')').count(),
            "{text:?}"
        );
        assert!(!text.starts_with('+'), "{text:?}");
    }
}

#[test]
fn regex_and_json_object() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    for seed in 0..10 {
        let (text, ended) = generate(&g, &tok, &Grammar::Regex("(yes|no)-[a-c]{2}".into()), seed);
        assert!(ended);
        let (word, tail) = text.split_once('-').unwrap();
        assert!(["yes", "no"].contains(&word), "{text}");
        assert!(
            tail.len() == 2 && tail.chars().all(|c| "abc".contains(c)),
            "{text}"
        );
    }
    // Any JSON object: only '{' or layout may come first, and the end is not allowed yet.
    let mut c = g.compile(&Grammar::JsonObject).unwrap();
    let mut logits = vec![0.0f32; tok.vocab_size()];
    c.apply(&mut logits).unwrap();
    let allowed: Vec<u8> = (0..256)
        .filter(|&b| logits[b].is_finite())
        .map(|b| tok.piece(b as u32)[0])
        .collect();
    assert!(allowed.contains(&b'{'));
    assert!(
        allowed.iter().all(|b| b"{ \n\r\t".contains(b)),
        "{allowed:?}"
    );
    let eos = tok.eos().unwrap() as usize;
    assert_eq!(logits[eos], f32::NEG_INFINITY);
    assert!(!c.is_accepting());
}

#[test]
fn a_token_outside_the_mask_is_an_error() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let mut c = g.compile(&Grammar::Regex("a+".into())).unwrap();
    let mut logits = vec![0.0f32; tok.vocab_size()];
    c.apply(&mut logits).unwrap();
    let b = tok.encode("b", false).unwrap()[0];
    assert!(matches!(c.accept(b), Err(StructuredError::Decode(_))));
}

#[test]
fn bad_grammars_are_refused_with_the_cause() {
    let tok = tokenizer();
    let g = Grammars::new(tok).unwrap();
    let cases = [
        (Grammar::Lark("start: nope".into()), "nope"),
        (Grammar::Regex("(".into()), ""),
        (Grammar::JsonSchema(json!([1])), "must be an object"),
        (Grammar::JsonSchema(json!({"type": "nonsense"})), "nonsense"),
        (
            Grammar::Gbnf("root ::= undefined-rule".into()),
            "undefined-rule",
        ),
    ];
    for (grammar, want) in cases {
        match g.compile(&grammar) {
            Err(StructuredError::Grammar(e)) => assert!(e.contains(want), "{grammar:?}: {e}"),
            Err(e) => panic!("{grammar:?}: {e}"),
            Ok(_) => panic!("{grammar:?} compiled"),
        }
    }
}
