#!/usr/bin/env python3
"""PyTorch reference for `wgllm bench` on an embedding model: what sentence-transformers runs.

Builds a BERT of one of `wgllm synth`'s encoder presets with random weights in Hugging Face
transformers (fp16 on CUDA, scaled-dot-product attention), and times what
`SentenceTransformer.encode` does after tokenizing: the forward pass of a padded batch, mean
pooling over the attention mask and L2 normalisation, synchronized, for every (batch, tokens)
pair; then prints embeddings/s beside a `wgllm bench -o json` report with the ratio.

    wgllm synth --preset minilm-l6 --dtype f16 -o minilm.gguf
    wgllm bench -m minilm.gguf -p 16,128,512 --batch 1,32,256 -o json > wgllm.json
    python3 bench/embed_torch.py --preset minilm-l6 --wgllm wgllm.json

Needs torch and transformers; exits with status 2, saying why, when either is missing.
"""

import argparse
import json
import statistics
import sys
import time

# (hidden, layers, heads, ff, vocab, positions): `wgllm synth`'s presets (cmd/synth.rs).
PRESETS = {
    "minilm-l6": (384, 6, 12, 1536, 30_522, 512),
    "bge-base": (768, 12, 12, 3072, 30_522, 512),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, choices=sorted(PRESETS))
    p.add_argument("-p", "--tokens", default="16,128,512", help="comma-separated lengths")
    p.add_argument("--batch", default="1,32,256", help="comma-separated batch sizes")
    p.add_argument("-r", "--repetitions", type=int, default=5)
    p.add_argument("--device", default="cuda", help="cuda (fp16) or cpu (fp32, for testing)")
    p.add_argument("--wgllm", metavar="JSON", help="a `wgllm bench -o json` report to compare")
    return p.parse_args()


def main():
    args = parse_args()
    try:
        import torch
        from transformers import BertConfig, BertModel
    except ImportError as e:
        print(f"embed_torch.py: {e}; skipped", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("embed_torch.py: no CUDA device; skipped", file=sys.stderr)
        return 2
    hidden, layers, heads, ff, vocab, positions = PRESETS[args.preset]
    cfg = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, intermediate_size=ff,
                     max_position_embeddings=positions, attn_implementation="sdpa")
    dtype = torch.float16 if args.device == "cuda" else torch.float32
    model = BertModel(cfg, add_pooling_layer=False).to(args.device, dtype).eval()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(1234)

    def encode(ids, mask):
        # sentence-transformers' Transformer → Pooling(mean) → Normalize.
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled.float(), dim=-1)

    rows = []
    with torch.inference_mode():
        for n in map(int, args.tokens.split(",")):
            for b in map(int, args.batch.split(",")):
                ids = torch.randint(1000, vocab, (b, n), generator=g).to(args.device)
                mask = torch.ones(b, n, dtype=torch.long, device=args.device)
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 1.5:  # past the GPU's clock ramp
                    encode(ids, mask)
                    sync()
                rates = []
                for _ in range(args.repetitions):
                    t = time.perf_counter()
                    encode(ids, mask)
                    sync()
                    rates.append(b / (time.perf_counter() - t))
                rows.append({"batch": b, "tokens": n, "embeddings_per_s": statistics.mean(rates),
                             "stddev": statistics.pstdev(rates)})
    ours = {}
    if args.wgllm:
        with open(args.wgllm) as f:
            ours = {(r["batch"], r["tokens"]): r["embeddings_per_s"] for r in json.load(f)["rows"]}
    print(f"{args.preset}: PyTorch {torch.__version__} {dtype} on {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""))
    print()
    print("| batch | tokens | PyTorch embeddings/s | wgllm embeddings/s | wgllm / PyTorch |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        w = ours.get((r["batch"], r["tokens"]))
        ratio = f"{w / r['embeddings_per_s']:.2f}" if w else "—"
        wtxt = f"{w:.1f}" if w else "—"
        print(f"| {r['batch']} | {r['tokens']} | {r['embeddings_per_s']:.1f} ± {r['stddev']:.1f} "
              f"| {wtxt} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
