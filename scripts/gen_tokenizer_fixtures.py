#!/usr/bin/env python3
"""Reference token ids and chat renderings for the tokenizer tests, from implementations
independent of ours.

    python3 -m pip install transformers gguf sentencepiece protobuf tokenizers   # no torch needed
    wgllm pull smollm2 && wgllm pull gemma3-270m     # or copy the files into the cache yourself
    python3 scripts/gen_tokenizer_fixtures.py [MODEL_DIR]

MODEL_DIR defaults to ~/.cache/wgllm/models. Writes crates/models/tests/fixtures/tokenizer/
{smollm2,gemma3}.json, read by crates/models/tests/tokenizer_fixtures.rs.

Which implementation produces the reference:

- SmolLM2 (`tokenizer.ggml.model = gpt2`, byte-level BPE): transformers' own GGUF converter
  (`transformers.integrations.gguf.gguf_tokenizer_mapping.convert_gguf_tokenizer`) builds a
  Hugging Face `tokenizers` tokenizer from the metadata read with the `gguf` package (the
  transformers GGUF *reader* imports torch, so it is bypassed). The chat template is rendered by
  transformers' `apply_chat_template` (jinja2).
- Gemma 3 (`tokenizer.ggml.model = llama`, SentencePiece BPE): Google's `sentencepiece` library,
  loading a model proto rebuilt from the GGUF's pieces, scores and types, encodes the raw text;
  transformers' added-token `Trie` cuts the special tokens out first.

Where transformers and llama.cpp disagree, the fixtures follow llama.cpp (`llama-tokenize`, which
`Tokenizer::encode(text, true)` mirrors), as listed here:

1. BOS/EOS: added exactly when llama.cpp would (`tokenizer.ggml.add_bos_token`, else its per-model
   default), not by the transformers post-processor.
2. SmolLM2's pre-tokenizer: transformers' converter has no entry for `tokenizer.ggml.pre = smollm`
   and falls back to GPT-2's pattern; llama.cpp splits every digit first (`\\p{N}`, then GPT-2's
   pattern). We install llama.cpp's split list, which is also what the original SmolLM2
   `tokenizer.json` does (`Digits(individual_digits)` then `ByteLevel`).
3. Gemma 3: transformers' converter derives BPE merges from the order tokens appear in the file,
   while llama.cpp (and sentencepiece) merge by score; and transformers renames the user-defined
   whitespace tokens ("  " -> "▁▁") while llama.cpp matches them in the raw text. sentencepiece
   with llama.cpp's partition reproduces llama.cpp. Texts where transformers' GGUF tokenizer
   gives different ids are reported on stderr (for information only).
4. Special tokens in the text: llama.cpp matches every control, user-defined and unknown token
   (longest first), plus the tokens it forces to control by their text (`<|im_end|>`,
   `<end_of_turn>`, `<reponame>`…); transformers' added tokens are the same set here.
5. Gemma's file has no `tokenizer.chat_template`; our tokenizer then reports an error (its
   vocabulary has no `<|im_start|>` for the ChatML fallback), recorded as `"chat": null`.
"""

import json
import os
import sys

from gguf import GGUFReader

TEXTS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "multiple   spaces   here",
    "   ",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "1234567 and 3.14159 and 1,000,000",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'fn main() {\n\tprintln!("hi");\n}\n',
    "日本語のテキストです。中文也可以。",
    "Emoji: 😀👍🏽 🇫🇷 ❤️ 🤖",
    "Ünïcödé àccents: café, naïve, Straße",
    "Привет, мир! Γειά σου κόσμε",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ \u200b zero-width",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<|endoftext|>",
    "<bos>text after bos",
    "<table><tr><td>cell</td></tr></table>",
    "I'm sure they'll say we've done it, isn't it?",
    "Mixed CASE and snake_case_identifiers and camelCaseToo",
    "https://example.com/path?query=1&x=y#frag",
    "email: someone@example.org, price: $19.99 (20% off!)",
    "a",
]

CHAT = [
    {"role": "user", "content": "Hello! Who are you?"},
    {"role": "assistant", "content": "I am a small language model."},
    {"role": "user", "content": "What is 2+2?"},
]

# Tokens llama.cpp forces to control type by their text (llama-vocab.cpp, `load`).
LLAMA_CPP_EOG_TEXTS = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
}


def read_gguf(path):
    r = GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer."):
            meta[k] = f.contents()
    meta["general.architecture"] = r.fields["general.architecture"].contents()
    return meta


def special_texts(meta):
    """Control, user-defined and unknown tokens (llama.cpp's `cache_special_tokens`)."""
    toks, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    return [t for t, ty in zip(toks, types) if ty in (2, 3, 4) or t in LLAMA_CPP_EOG_TEXTS]


def add_bos_eos(meta, ids, default_bos):
    bos = meta.get("tokenizer.ggml.add_bos_token", default_bos)
    eos = meta.get("tokenizer.ggml.add_eos_token", False)
    out = list(ids)
    if bos:
        out.insert(0, meta["tokenizer.ggml.bos_token_id"])
    if eos:
        out.append(meta["tokenizer.ggml.eos_token_id"])
    return out


def smollm2(path):
    from tokenizers import Regex, pre_tokenizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    meta = read_gguf(path)
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "smollm"
    d = {name: meta[f"tokenizer.{k}"] for k, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items() if f"tokenizer.{k}" in meta}
    hf, _ = convert_gguf_tokenizer(meta["general.architecture"], d)
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.Split(Regex(gpt2), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    added = {t.content for t in hf.get_added_tokens_decoder().values()}
    missing = set(special_texts(meta)) - added
    assert not missing, f"special tokens transformers did not add: {missing}"
    cases = []
    for text in TEXTS:
        ids = hf.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": add_bos_eos(meta, ids, default_bos=False)})

    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=hf,
        bos_token=meta["tokenizer.ggml.tokens"][meta["tokenizer.ggml.bos_token_id"]],
        eos_token=meta["tokenizer.ggml.tokens"][meta["tokenizer.ggml.eos_token_id"]],
    )
    tpl = meta["tokenizer.chat_template"]
    chat = {
        "messages": CHAT,
        "with_generation_prompt": tok.apply_chat_template(CHAT, chat_template=tpl, tokenize=False, add_generation_prompt=True),
        "without_generation_prompt": tok.apply_chat_template(CHAT[:2], chat_template=tpl, tokenize=False, add_generation_prompt=False),
    }
    return {"model": os.path.basename(path), "cases": cases, "chat": chat}


def gemma3(path, workdir):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers.tokenization_python import Trie

    meta = read_gguf(path)
    assert meta["tokenizer.ggml.model"] == "llama"
    toks, scores, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"], meta["tokenizer.ggml.token_type"]
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id = meta["tokenizer.ggml.unknown_token_id"]
    m.trainer_spec.bos_id = meta["tokenizer.ggml.bos_token_id"]
    m.trainer_spec.eos_id = meta["tokenizer.ggml.eos_token_id"]
    m.trainer_spec.pad_id = meta["tokenizer.ggml.padding_token_id"]
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(toks, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty if ty in (1, 2, 3, 4, 5, 6) else 1
    model_path = os.path.join(workdir, "gemma3-from-gguf.model")
    with open(model_path, "wb") as f:
        f.write(m.SerializeToString())
    sp = spm.SentencePieceProcessor(model_file=model_path)

    trie = Trie()
    for t in special_texts(meta):
        trie.add(t)
    ids_of = {t: i for i, t in enumerate(toks)}
    add_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))

    def encode(text):
        out = []
        for piece in trie.split(text) if text else []:
            if piece in ids_of and (types[ids_of[piece]] in (2, 3, 4) or piece in LLAMA_CPP_EOG_TEXTS):
                out.append(ids_of[piece])
            else:
                # sentencepiece adds the dummy prefix itself when add_space_prefix is set; llama.cpp
                # adds it only at the start and after a special token, which with Gemma's
                # add_space_prefix = false never matters.
                assert not add_prefix
                out.extend(sp.encode(piece))
        return out

    cases = [{"text": t, "ids": add_bos_eos(meta, encode(t), default_bos=True)} for t in TEXTS]
    report_transformers_differences(meta, cases)
    return {"model": os.path.basename(path), "cases": cases, "chat": None}


def report_transformers_differences(meta, cases):
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

        d = {name: meta[f"tokenizer.{k}"] for k, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items() if f"tokenizer.{k}" in meta}
        hf, _ = convert_gguf_tokenizer(meta["general.architecture"], d)
    except Exception as e:  # informational only
        print(f"gemma3: transformers' GGUF tokenizer unavailable ({e})", file=sys.stderr)
        return
    for c in cases:
        theirs = add_bos_eos(meta, hf.encode(c["text"], add_special_tokens=False).ids, default_bos=True)
        if theirs != c["ids"]:
            print(f"gemma3: transformers' GGUF tokenizer differs on {c['text']!r}", file=sys.stderr)


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/wgllm/models")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.join(root, "crates", "models", "tests", "fixtures", "tokenizer")
    os.makedirs(out_dir, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        fixtures = {
            "smollm2": smollm2(os.path.join(model_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")),
            "gemma3": gemma3(os.path.join(model_dir, "gemma-3-270m-q4_k_m.gguf"), work),
        }
    for name, data in fixtures.items():
        path = os.path.join(out_dir, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {path} ({len(data['cases'])} texts)")


if __name__ == "__main__":
    main()
