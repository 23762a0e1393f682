#!/usr/bin/env python3
"""Perplexity of the reference model under deliberately wrong conventions, to show the chosen ones win.

    python3 scripts/reference/check_conventions.py smollm2|gemma3 [--chunks N]
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_fixtures as G  # noqa: E402
import model as M  # noqa: E402
from tok import GGUFTokenizer  # noqa: E402


def ppl(m, T, tokens, n_chunks):
    nll, count, first, n = 0.0, 0, G.PPL_CTX // 2, G.PPL_CTX
    for i in range(n_chunks):
        chunk = list(tokens[i * n:(i + 1) * n])
        if T.add_bos:
            chunk[0] = T.bos_id
        lg = m.forward(chunk, m.new_cache(), logits_for=list(range(first, n - 1))).astype(np.float64)
        lg -= lg.max(-1, keepdims=True)
        logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        nll -= logp[np.arange(n - 1 - first), chunk[first + 1:]].sum()
        count += n - 1 - first
    return math.exp(nll / count)


def variants(m):
    yield "as implemented", m
    v = copy.copy(m)
    v.rope_mode = M.ROPE_NEOX if m.rope_mode == M.ROPE_NORM else M.ROPE_NORM
    yield f"rope {v.rope_mode} instead of {m.rope_mode}", v
    if m.arch == "gemma3":
        norms = ("attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm")
        for label, d in (("norm weights + 1 (shift applied twice)", 1.0), ("norm weights - 1 (HF raw)", -1.0)):
            v = copy.copy(m)
            v.layers = [{k: (w + d if k in norms else w) for k, w in L.items()} for L in m.layers]
            v.output_norm = m.output_norm + d
            yield label, v
        v = copy.copy(m)
        v.layer_rope = [(m.rope_base, 1.0)] * m.n_layer
        yield "all layers rope base = rope.freq_base (no 10000 for SWA layers)", v
        v = copy.copy(m)
        v.layer_rope = [(10000.0, 1.0)] * m.n_layer
        yield "all layers rope base 10000", v
        v = copy.copy(m)
        v.swa_layers = [il % 6 != 0 for il in range(m.n_layer)]
        v.layer_rope = [(10000.0, 1.0) if s else (m.rope_base, 1.0) for s in v.swa_layers]
        yield "global layers at il % 6 == 0 instead of il % 6 == 5", v
        v = copy.copy(m)
        v.arch = "gemma3-noscale"  # skips the sqrt(n_embd) embedding scale
        yield "no sqrt(n_embd) embedding scale", v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(G.MODELS))
    ap.add_argument("--chunks", type=int, default=4)
    args = ap.parse_args()
    path = G.MODELS[args.model]
    m = M.Model(path)
    T = GGUFTokenizer(path, reader=m.reader)
    tokens = T.encode((G.FIXTURES / "ppl.txt").read_text(encoding="utf-8"))
    for label, v in variants(m):
        print(f"{args.model}: ppl {ppl(v, T, tokens, args.chunks):10.3f}  {label}", flush=True)


if __name__ == "__main__":
    main()
