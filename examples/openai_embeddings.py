#!/usr/bin/env python3
"""The official `openai` Python client's `embeddings.create`, unchanged, against `wgllm serve`.

    wgllm serve -m minilm --port 8080 &      # all-MiniLM-L6-v2, pulled and converted on first use
    python3 -m pip install openai
    python3 examples/openai_embeddings.py [--base-url http://127.0.0.1:8080/v1]

Embeds three sentences (the client asks for base64 and decodes it) and once more as floats, and
prints their cosine similarities. With `--check FIXTURE` (the reference fixture
`crates/models/tests/fixtures/minilm_embed.json`), every vector must be unit length, the two
encodings must agree, and each must point where the independent reference's does
(cosine >= 0.9999); the exit status says whether they did.
"""

import argparse
import json
import math
import sys

from openai import OpenAI


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--check", metavar="FIXTURE", help="compare with the reference fixture")
    args = ap.parse_args()
    # The server checks no key; the client insists on one.
    client = OpenAI(base_url=args.base_url, api_key="none")

    model = client.models.list().data[0].id
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply after the announcement.",
    ]
    r = client.embeddings.create(model=model, input=texts)
    vecs = [d.embedding for d in r.data]
    floats = client.embeddings.create(model=model, input=texts, encoding_format="float")
    print(f"model: {r.model}, {len(vecs)} embeddings of {len(vecs[0])} values, usage {r.usage}")
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            print(f"cosine({i}, {j}) = {cosine(vecs[i], vecs[j]):.4f}: {texts[i]!r} / {texts[j]!r}")

    if not args.check:
        return 0
    with open(args.check) as f:
        fixture = {t["text"]: t for t in json.load(f)["texts"]}
    bad = []
    for text, v, w in zip(texts, vecs, (d.embedding for d in floats.data)):
        norm = math.sqrt(sum(x * x for x in v))
        if abs(norm - 1) > 1e-4:
            bad.append(f"{text!r}: norm {norm}")
        if max(abs(x - y) for x, y in zip(v, w)) > 1e-6:
            bad.append(f"{text!r}: base64 and float disagree")
        c = cosine(v, fixture[text]["embedding"])
        print(f"cosine with the reference {c:.7f}: {text!r}")
        if c < 0.9999:
            bad.append(f"{text!r}: cosine {c} with the reference")
    want_tokens = sum(len(fixture[t]["ids"]) for t in texts)
    if r.usage.prompt_tokens != want_tokens:
        bad.append(f"usage.prompt_tokens {r.usage.prompt_tokens}, the reference's ids {want_tokens}")
    for b in bad:
        print(f"FAIL {b}", file=sys.stderr)
    print("openai client check: " + ("ok" if not bad else f"{len(bad)} failures"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
