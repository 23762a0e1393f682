//! Tokenizer tests on tiny vocabularies written as GGUF metadata here, so they need no model
//! files: byte-level BPE merges and pre-tokenizers, SentencePiece merges by score and byte
//! fallback, special-token splitting, UTF-8-safe streaming, chat templates and errors. The
//! expected ids follow llama.cpp's algorithms (`src/llama-vocab.cpp`), worked by hand.

use wgllm_gguf::{Array, GgufFile, GgufWriter, Value};
use wgllm_models::tokenizer::{ChatMessage, TokenType, Tokenizer, TokenizerError};

fn strings(v: &[&str]) -> Value {
    Value::Array(Array::String(v.iter().map(|s| s.to_string()).collect()))
}

fn build(kv: Vec<(&str, Value)>) -> Result<Tokenizer, TokenizerError> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .unwrap();
    for (k, v) in kv {
        w.add_metadata(k, v).unwrap();
    }
    Tokenizer::from_gguf(&GgufFile::from_bytes(w.to_vec().into()).unwrap())
}

/// A byte-level BPE vocabulary. `😀` is F0 9F 98 80, spelled `ðŁĺĢ` in GPT-2's alphabet; only
/// its halves are tokens, so it always takes two.
const BPE_TOKENS: &[&str] = &[
    "<|endoftext|>", // 0, control
    "<|im_start|>",  // 1, control
    "<|im_end|>",    // 2, control
    "h",
    "e",
    "l",
    "o",
    "Ġ",
    "w",
    "r",
    "d",
    "1",
    "2",
    "3",
    "Ċ", // 3..=14
    "he",
    "ll",
    "hell",
    "hello",
    "Ġw",
    "or",
    "Ġwor",
    "Ġworl",
    "Ġworld",
    "12", // 15..=24
    "ð",
    "Ł",
    "ĺ",
    "Ģ",
    "ðŁ",
    "ĺĢ", // 25..=30
    "<",
    "|",
    ">",
    "i",
    "m",
    "_",
    "s",
    "t",
    "a",
    "n", // 31..=40
];
const BPE_MERGES: &[&str] = &[
    "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "1 2", "ð Ł",
    "ĺ Ģ",
];
const HELLO: u32 = 18;
const WORLD: u32 = 23;
const SPACE: u32 = 7;

fn bpe(pre: &str, extra: Vec<(&'static str, Value)>) -> Tokenizer {
    let types: Vec<i32> = (0..BPE_TOKENS.len())
        .map(|i| if i < 3 { 3 } else { 1 })
        .collect();
    let mut kv = vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String(pre.into())),
        ("tokenizer.ggml.tokens", strings(BPE_TOKENS)),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
        ("tokenizer.ggml.merges", strings(BPE_MERGES)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ];
    kv.extend(extra);
    build(kv).unwrap()
}

#[test]
fn bpe_applies_merges_within_pre_tokenized_words() {
    let t = bpe("smollm", vec![]);
    assert_eq!(t.encode("hello world", false).unwrap(), [HELLO, WORLD]);
    // `hel`: `h e` then nothing merges `he` with `l`.
    assert_eq!(t.encode("hel", false).unwrap(), [15, 5]);
    assert_eq!(t.encode("", true).unwrap(), Vec::<u32>::new());
    assert_eq!(t.decode(&[HELLO, WORLD, SPACE, 14]), "hello world \n");
}

#[test]
fn pre_tokenizer_decides_which_merges_can_apply() {
    // smollm splits every digit first, so `1 2` never merges; GPT-2 keeps ` 123` as one word.
    let smollm = bpe("smollm", vec![]);
    assert_eq!(
        smollm.encode("hello 123", false).unwrap(),
        [HELLO, SPACE, 11, 12, 13]
    );
    let gpt2 = bpe("gpt-2", vec![]);
    assert_eq!(
        gpt2.encode("hello 123", false).unwrap(),
        [HELLO, SPACE, 24, 13]
    );
    // Qwen 2 also splits single digits, and keeps the space with the punctuation-free word.
    let qwen2 = bpe("qwen2", vec![]);
    assert_eq!(
        qwen2.encode("hello 123", false).unwrap(),
        [HELLO, SPACE, 11, 12, 13]
    );
    // Llama 3 groups up to three digits: `123` is one word, merged as `12` `3`.
    let llama3 = bpe("llama3", vec![]);
    assert_eq!(
        llama3.encode("hello 123", false).unwrap(),
        [HELLO, SPACE, 24, 13]
    );
}

#[test]
fn special_tokens_are_matched_whole_and_never_merged_across() {
    let t = bpe("smollm", vec![]);
    assert_eq!(
        t.encode("<|im_start|>hello<|im_end|>", false).unwrap(),
        [1, HELLO, 2]
    );
    // `hel` + `lo` would merge into `hello` without the token between them.
    assert_eq!(
        t.encode("hel<|endoftext|>lo", false).unwrap(),
        [15, 5, 0, 5, 6]
    );
    // Not parsed: the control token is plain text, spelled out of single characters.
    let plain = t.encode_with("<|im_end|>", false, false).unwrap();
    assert_eq!(plain, [31, 32, 34, 35, 36, 4, 40, 10, 32, 33]);
    // Decoding renders control tokens as nothing.
    assert_eq!(t.decode(&[1, HELLO, 2]), "hello");
    assert_eq!(t.token_type(1), TokenType::Control);
}

#[test]
fn bos_and_eos_follow_the_metadata() {
    let t = bpe("smollm", vec![]);
    assert!(!t.adds_bos());
    assert_eq!(t.encode("hello", true).unwrap(), [HELLO]);
    let t = bpe(
        "smollm",
        vec![
            ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
            ("tokenizer.ggml.add_eos_token", Value::Bool(true)),
        ],
    );
    assert_eq!(t.encode("hello", true).unwrap(), [1, HELLO, 2]);
    assert_eq!(t.encode("hello", false).unwrap(), [HELLO]);
    // Llama 3's pre-tokenizer adds BOS when the file does not say.
    assert!(bpe("llama3", vec![]).adds_bos());
}

#[test]
fn end_of_generation_tokens() {
    let t = bpe("smollm", vec![]);
    assert_eq!(
        (t.bos(), t.eos(), t.vocab_size()),
        (Some(1), Some(2), BPE_TOKENS.len())
    );
    assert!(t.is_eog(0) && t.is_eog(2) && !t.is_eog(1) && !t.is_eog(HELLO));
    assert_eq!(t.token_str(WORLD), Some("Ġworld"));
    assert_eq!(t.token_str(9999), None);
    assert_eq!(t.token_id("hello"), Some(HELLO));
}

#[test]
fn streaming_never_splits_a_character() {
    let t = bpe("smollm", vec![]);
    let ids = t.encode("hello😀", false).unwrap();
    assert_eq!(ids, [HELLO, 29, 30]);
    let mut s = t.stream_decoder();
    assert_eq!(s.push(HELLO), "hello");
    assert_eq!(s.push(29), "");
    assert_eq!(s.pending(), [0xF0, 0x9F]);
    assert_eq!(s.push(30), "😀");
    assert_eq!(s.finish(), "");
    // A half character at the end of the stream comes out as U+FFFD; so does a byte that can
    // never be part of a character, without holding back what follows.
    assert_eq!(s.push(29), "");
    assert_eq!(s.finish(), "\u{FFFD}");
    assert_eq!(s.push(28), "\u{FFFD}");
    assert_eq!(s.push(HELLO), "hello");
    assert_eq!(t.decode(&[29]), "\u{FFFD}");
}

/// A SentencePiece vocabulary: `<unk> <s> </s>`, 256 byte tokens, then scored pieces.
fn spm(add_space_prefix: Option<bool>) -> Tokenizer {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let pieces: &[(&str, f32)] = &[
        ("▁", -1.0),
        ("h", -1.0),
        ("e", -1.0),
        ("l", -1.0),
        ("o", -1.0),
        ("he", -2.0),
        ("ll", -3.0),
        ("hell", -4.0),
        ("hello", -5.0),
        ("▁h", -1.5),
        ("<b>", -1.0),
    ];
    for &(p, s) in pieces {
        tokens.push(p.to_string());
        types.push(if p == "<b>" { 4 } else { 1 });
        scores.push(s);
    }
    let mut kv = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))),
        ("tokenizer.ggml.scores", Value::Array(Array::F32(scores))),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
    ];
    if let Some(v) = add_space_prefix {
        kv.push(("tokenizer.ggml.add_space_prefix", Value::Bool(v)));
    }
    build(kv).unwrap()
}

fn piece(t: &Tokenizer, p: &str) -> u32 {
    t.token_id(p).unwrap()
}

#[test]
fn spm_merges_the_best_scored_pair_first() {
    // Without a prefix space: `he` (-2) first, then `ll` (-3), `hell`, `hello`.
    let t = spm(Some(false));
    assert_eq!(t.encode("hello", false).unwrap(), [piece(&t, "hello")]);
    // With llama.cpp's default prefix space, `▁h` (-1.5) beats `he` (-2) and takes the `h`, so
    // `e` stays alone and only `ll` merges after it.
    let t = spm(None);
    let want = ["▁h", "e", "ll", "o"].map(|p| piece(&t, p));
    assert_eq!(t.encode("hello", false).unwrap(), want);
    // BOS by default for SentencePiece; the prefix space is added again after a special token.
    let mut with_bos = vec![1];
    with_bos.extend(want);
    assert_eq!(t.encode("hello", true).unwrap(), with_bos);
    assert_eq!(
        t.encode("</s>hello", false).unwrap(),
        [
            2,
            piece(&t, "▁h"),
            piece(&t, "e"),
            piece(&t, "ll"),
            piece(&t, "o")
        ]
    );
}

#[test]
fn spm_falls_back_to_byte_tokens() {
    let t = spm(Some(false));
    let byte = |b: u8| 3 + b as u32;
    // `é` is C3 A9; the space becomes `▁`.
    assert_eq!(
        t.encode("hello é", false).unwrap(),
        [piece(&t, "hello"), piece(&t, "▁"), byte(0xC3), byte(0xA9)]
    );
    let ids = t.encode("😀", false).unwrap();
    assert_eq!(ids, [byte(0xF0), byte(0x9F), byte(0x98), byte(0x80)]);
    let mut s = t.stream_decoder();
    let out: Vec<String> = ids.iter().map(|&id| s.push(id)).collect();
    assert_eq!(out, ["", "", "", "😀"]);
    assert_eq!(t.decode(&ids), "😀");
    assert_eq!(t.token_type(byte(0)), TokenType::Byte);
}

#[test]
fn spm_user_defined_tokens_and_decoding() {
    let t = spm(None);
    let b = piece(&t, "<b>");
    // User-defined tokens are matched even when special tokens are not parsed.
    let ids = t.encode_with("<b>hello", false, false).unwrap();
    assert_eq!(ids[0], b);
    assert_eq!(t.decode(&ids), "<b> hello");
    // The prefix space is dropped from the first token unless BOS comes first (as llama.cpp).
    let ids = t.encode("hello", false).unwrap();
    assert_eq!(t.decode(&ids), "hello");
    assert_eq!(t.decode(&t.encode("hello", true).unwrap()), " hello");
    // Without parsing, a control token's text is ordinary text.
    assert!(!t.encode_with("</s>", false, false).unwrap().contains(&2));
}

#[test]
fn chat_templates_render_like_transformers() {
    // trim_blocks eats the newline after `{% endif %}`, as jinja2 does in transformers.
    let template = "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}\
        [{{ m.role }}]{{ m.content.strip() }}{% if m.content.startswith(' ') %}!{% endif %}\n{% endfor %}\
        {% if add_generation_prompt %}[assistant]{% endif %}";
    let t = bpe(
        "smollm",
        vec![("tokenizer.chat_template", Value::String(template.into()))],
    );
    let msgs = [
        ChatMessage::new("user", " hi "),
        ChatMessage::new("assistant", "hello"),
    ];
    assert_eq!(
        t.render_chat(&msgs, true).unwrap(),
        "<|im_start|>[user]hi![assistant]hello[assistant]"
    );
    let err = t
        .render_chat(&[ChatMessage::new("system", "x")], false)
        .unwrap_err();
    assert!(
        matches!(err, TokenizerError::Template(_)) && err.to_string().contains("no system"),
        "{err}"
    );
    assert_eq!(t.chat_template(), Some(template));
}

#[test]
fn chat_falls_back_to_chatml_only_with_its_tokens() {
    let t = bpe("smollm", vec![]);
    let msgs = [ChatMessage::new("user", "hi")];
    assert_eq!(
        t.render_chat(&msgs, true).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let err = spm(None).render_chat(&msgs, true).unwrap_err();
    assert!(matches!(err, TokenizerError::NoChatTemplate), "{err}");
}

fn minimal(model: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("tokenizer.ggml.model", Value::String(model.into())),
        ("tokenizer.ggml.tokens", strings(&["a", "b", "ab"])),
        ("tokenizer.ggml.merges", strings(&["a b"])),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
    ]
}

fn error(kv: Vec<(&'static str, Value)>) -> String {
    build(kv).unwrap_err().to_string()
}

#[test]
fn errors_name_the_problem() {
    let e = error(vec![(
        "tokenizer.ggml.model",
        Value::String("wordpiece".into()),
    )]);
    assert!(
        e.contains("wordpiece") && e.contains("llama") && e.contains("gpt2"),
        "{e}"
    );

    let mut kv = minimal("gpt2");
    kv.push(("tokenizer.ggml.pre", Value::String("klingon".into())));
    let e = error(kv);
    assert!(
        e.contains("klingon") && e.contains("smollm") && e.contains("llama3"),
        "{e}"
    );

    let e = error(vec![(
        "tokenizer.ggml.model",
        Value::String("llama".into()),
    )]);
    assert!(e.contains("tokenizer.ggml.tokens"), "{e}");

    let mut kv = minimal("llama");
    kv[1] = ("tokenizer.ggml.tokens", strings(&["a", "b", "a"]));
    let e = error(kv);
    assert!(e.contains("duplicate token \"a\" at ids 0 and 2"), "{e}");

    let mut kv = minimal("llama");
    kv.push(("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0]))));
    let e = error(kv);
    assert!(
        e.contains("tokenizer.ggml.scores has 1 entries for 3 tokens"),
        "{e}"
    );

    let mut kv = minimal("gpt2");
    kv.remove(2);
    let e = error(kv);
    assert!(e.contains("tokenizer.ggml.merges"), "{e}");

    let mut kv = minimal("gpt2");
    kv[2] = ("tokenizer.ggml.merges", strings(&["ab"]));
    let e = error(kv);
    assert!(e.contains("merges entry 0 (\"ab\")"), "{e}");

    let mut kv = minimal("gpt2");
    kv[2] = ("tokenizer.ggml.merges", strings(&["a c"]));
    let e = error(kv);
    assert!(e.contains("BPE"), "{e}");

    // GPT-2's default BOS id 11 is outside this vocabulary, so asking for BOS is an error.
    let mut kv = minimal("gpt2");
    kv[3] = ("tokenizer.ggml.add_bos_token", Value::Bool(true));
    let e = error(kv);
    assert!(e.contains("add_bos_token"), "{e}");

    let mut kv = minimal("llama");
    kv.push(("tokenizer.ggml.token_type", Value::String("normal".into())));
    let e = error(kv);
    assert!(
        e.contains("tokenizer.ggml.token_type") && e.contains("array of integers"),
        "{e}"
    );
}
