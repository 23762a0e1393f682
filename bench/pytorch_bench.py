#!/usr/bin/env python3
"""PyTorch reference for `wgllm bench`: the same model shapes in Hugging Face transformers.

Builds a model of one of `wgllm synth`'s presets with random weights (bf16, CUDA, static KV
cache), measures prefill of P tokens and decode of N tokens one by one from an empty cache (as
`wgllm bench` and llama-bench do), and prints a side-by-side table with the `wgllm bench -o json`
reports given on the command line, with the ratio wgllm / PyTorch.

    python3 bench/pytorch_bench.py --preset llama-3.2-1b --wgllm l1b-q4_0.json
    python3 bench/pytorch_bench.py --preset llama-3.1-8b --wgllm 8b-q4_0.json --wgllm 8b-q4_k.json

Needs torch and transformers (4.45 or newer) and an NVIDIA GPU. Exits with status 2, printing why,
when any of them is missing, so scripts can skip it.
"""

import argparse
import inspect
import json
import statistics
import sys
import time

# (config class, vocab, embd, layers, ff, heads, kv heads, head_dim, tied) — the shapes of
# `wgllm synth --preset NAME` (crates/wgllm/src/cmd/synth.rs).
PRESETS = {
    "smollm2-135m": ("LlamaConfig", 49_152, 576, 30, 1536, 9, 3, None, True),
    "llama-3.2-1b": ("LlamaConfig", 128_256, 2048, 16, 8192, 32, 8, None, True),
    "llama-3.1-8b": ("LlamaConfig", 128_256, 4096, 32, 14_336, 32, 8, None, False),
    "qwen3-0.6b": ("Qwen3Config", 151_936, 1024, 28, 3072, 16, 8, 128, True),
    "qwen3-8b": ("Qwen3Config", 151_936, 4096, 36, 12_288, 32, 8, 128, False),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, choices=sorted(PRESETS))
    p.add_argument("-p", "--n-prompt", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("--wgllm", action="append", default=[], metavar="JSON",
                   help="a `wgllm bench -o json` report to compare with (repeatable)")
    p.add_argument("--save-json", metavar="FILE", help="also write PyTorch's figures here")
    p.add_argument("--torch-json", metavar="FILE",
                   help="print the table from figures a previous --save-json wrote instead of "
                        "measuring (needs neither torch nor a GPU)")
    return p.parse_args()


def build(preset, max_len):
    import torch
    import transformers

    cls, vocab, embd, layers, ff, heads, kv, head_dim, tied = PRESETS[preset]
    kwargs = dict(vocab_size=vocab, hidden_size=embd, num_hidden_layers=layers,
                  intermediate_size=ff, num_attention_heads=heads, num_key_value_heads=kv,
                  max_position_embeddings=max(8192, max_len), tie_word_embeddings=tied)
    if head_dim is not None:
        kwargs["head_dim"] = head_dim
    config = getattr(transformers, cls)(**kwargs)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    model.eval()
    return config, model


def make_cache(config, max_len):
    import torch
    from transformers import StaticCache

    # transformers 4.x takes batch size, device and dtype; 5.x takes them from the first update
    # (and ignores the extra keyword arguments).
    return StaticCache(config=config, max_batch_size=1, max_cache_len=max_len,
                       device="cuda", dtype=torch.bfloat16)


def forward_kwargs(model):
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    keep_kw = "logits_to_keep" if "logits_to_keep" in params else "num_logits_to_keep"
    return cache_kw, keep_kw


def measure(args):
    import torch

    max_len = max(args.n_prompt, args.n_gen)
    config, model = build(args.preset, max_len)
    cache = make_cache(config, max_len)
    cache_kw, keep_kw = forward_kwargs(model)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    vocab = PRESETS[args.preset][1]

    def step(ids, start):
        pos = torch.arange(start, start + ids.shape[1], device="cuda").unsqueeze(0)
        model(input_ids=ids, position_ids=pos, use_cache=True, **{cache_kw: cache, keep_kw: 1})

    def tokens(n):
        return torch.randint(0, vocab, (1, n), device="cuda", generator=gen)

    @torch.inference_mode()
    def prefill():
        ids = tokens(args.n_prompt)
        cache.reset()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(ids, 0)
        torch.cuda.synchronize()
        return args.n_prompt / (time.perf_counter() - t0)

    @torch.inference_mode()
    def decode(n):
        ids = tokens(n)
        cache.reset()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            step(ids[:, i:i + 1], i)
        torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)

    out = {"preset": args.preset, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "results": []}
    if args.n_prompt > 0:
        prefill()
        samples = [prefill() for _ in range(args.repetitions)]
        out["results"].append({"test": f"pp{args.n_prompt}", "samples_ts": samples})
    if args.n_gen > 0:
        decode(min(args.n_gen, 3))
        samples = [decode(args.n_gen) for _ in range(args.repetitions)]
        out["results"].append({"test": f"tg{args.n_gen}", "samples_ts": samples})
    for r in out["results"]:
        r["avg_ts"] = statistics.mean(r["samples_ts"])
        r["stddev_ts"] = statistics.stdev(r["samples_ts"]) if len(r["samples_ts"]) > 1 else 0.0
    import transformers
    out["transformers"] = transformers.__version__
    return out


def main():
    args = parse_args()
    if args.torch_json:
        with open(args.torch_json) as f:
            torch_figures = json.load(f)
        print_table(args, torch_figures)
        return 0
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"pytorch_bench: skipped: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("pytorch_bench: skipped: torch sees no CUDA device", file=sys.stderr)
        return 2
    torch_figures = measure(args)
    if args.save_json:
        with open(args.save_json, "w") as f:
            json.dump(torch_figures, f, indent=2)
    print_table(args, torch_figures)
    return 0


def print_table(args, torch_figures):
    ours = {r["test"]: r for r in torch_figures["results"]}
    print(f"PyTorch {torch_figures['torch']}, transformers {torch_figures['transformers']}, "
          f"{torch_figures['device']}: {args.preset}, random bf16 weights, static KV cache")
    print()
    print("| model | test | wgllm t/s | PyTorch bf16 t/s | wgllm / PyTorch |")
    print("| --- | ---: | ---: | ---: | ---: |")
    reports = []
    for path in args.wgllm:
        with open(path) as f:
            reports.append(json.load(f))
    if not reports:
        reports.append({"model": "-", "results": []})
    for rep in reports:
        theirs = {r["test"]: r for r in rep["results"]}
        for test, t in ours.items():
            w = theirs.get(test)
            wgllm = f"{w['avg_ts']:.2f} ± {w['stddev_ts']:.2f}" if w else "-"
            ratio = f"{w['avg_ts'] / t['avg_ts']:.3f}" if w else "-"
            print(f"| {rep['model']} vs {args.preset} bf16 | {test} | {wgllm} | "
                  f"{t['avg_ts']:.2f} ± {t['stddev_ts']:.2f} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
