#!/usr/bin/env python3
"""cuBLAS fp16 reference for issue 6's mat-mat shapes: torch.matmul in fp16 (f32 accumulation,
cuBLAS's default for half GEMM) timed with CUDA events, in TFLOP/s.

The shapes are `wgllm ops --large`'s f16 mat-mat cases, a weight of m rows and k columns times
n activation columns: 4096^3, and prefill of 512 tokens through a 4096 x 4096 and a
4096 -> 14336 layer. With --wgllm, the `wgllm ops --large` tables given (markdown lines
`| MUL_MAT f16 x f32 k=.. m=.. n=.. | check | us | GB/s | of copy | GFLOP/s |`) are read and each
shape's wgllm GFLOP/s is printed next to torch's with the ratio (the acceptance asks >= 0.5).

    python3 bench/torch_matmul.py --wgllm bench/out-coop/large-coop.txt

Exits with status 2, saying why, when torch or a CUDA device is missing.
"""

import argparse
import re
import statistics
import sys

# (k, m, n) as wgllm names them: dst[m, n] = sum_k w[k, m] x[k, n].
SHAPES = [(4096, 4096, 4096), (4096, 4096, 512), (4096, 14336, 512)]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=50, help="timed runs per shape (after 10 warm-ups)")
    p.add_argument("--wgllm", action="append", default=[], metavar="FILE",
                   help="`wgllm ops --large` output to compare with (repeatable)")
    return p.parse_args()


def wgllm_gflops(files):
    """{(k, m, n): GFLOP/s} of the f16 x f32 MUL_MAT rows of `wgllm ops --large` tables."""
    out = {}
    pat = re.compile(r"^\| MUL_MAT f16 x f32 k=(\d+) m=(\d+) n=(\d+) \|(.*)\|\s*$")
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                m = pat.match(line.strip())
                if not m:
                    continue
                cells = [c.strip() for c in m.group(4).split("|")]
                try:
                    out[(int(m.group(1)), int(m.group(2)), int(m.group(3)))] = float(cells[-1])
                except ValueError:
                    pass
    return out


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    ours = wgllm_gflops(args.wgllm)
    dev = torch.cuda.get_device_name(0)
    print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, {dev}")
    print("| shape (k, m, n) | torch fp16 TFLOP/s | wgllm TFLOP/s | wgllm / torch |")
    print("|---|---:|---:|---:|")
    for k, m, n in SHAPES:
        # x [n, k] @ w^T [k, m] -> [n, m]: wgllm's dst[m, n] transposed, the same FLOPs.
        x = torch.randn(n, k, device="cuda", dtype=torch.float16)
        w = torch.randn(k, m, device="cuda", dtype=torch.float16)
        for _ in range(10):
            torch.matmul(x, w)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(x, w)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        tflops = 2 * k * m * n / statistics.median(times) / 1e12
        got = ours.get((k, m, n))
        if got is None:
            print(f"| {k} x {m} x {n} | {tflops:.1f} | - | - |")
        else:
            print(f"| {k} x {m} x {n} | {tflops:.1f} | {got / 1e3:.1f} | {got / 1e3 / tflops:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
