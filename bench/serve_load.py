#!/usr/bin/env python3
"""Bounded load test of `wgllm serve` on loopback (Python stdlib only: urllib + threads).

Starts the server binary on a free port, waits for /health, warms it up, then for each
concurrency level (default 1, 4, 8 clients) lets every client send --requests streaming chat
requests one after another, and reports per level: requests/s, p50/p99 latency, p50/p99
time-to-first-token, and aggregate generated tokens/s (all clients' completion tokens over the
level's wall time). With --mixes json,tools, the highest level runs again with every other
request held to a JSON schema (json) or made to call a tool (tools); their replies are checked,
and their tokens/s compared with the free run's. Writes serve_load.json and serve_load.md into
--out and prints the table.

Example (the H200 run of issue 7):
    python3 bench/serve_load.py --wgllm .devbin/wgllm --model /tmp/smollm2.gguf \
        --out bench/results/serve_load_h200

Exit status: 0 when every request succeeded and, with --min-ratio R, the aggregate tokens/s at
the highest concurrency is at least R times that at 1 client; 1 otherwise.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Explain in detail how a steam engine works, step by step.",
    "Write a long story about a dragon who is afraid of heights.",
    "Describe a journey across a desert, from sunrise to sunset, in detail.",
    "Write a long letter from a sailor to his family at home.",
    "Explain how bread is made, from the field to the bakery, in detail.",
    "Write a long story about a robot learning to paint.",
    "Describe a busy market in an old city, stall by stall.",
]


def percentile(values, p):
    """The p-th percentile (0..100) by linear interpolation; None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def start_server(args, log_path):
    """Starts `wgllm serve`; returns (process, base URL) once it listens."""
    cmd = [
        args.wgllm, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0",
        "--parallel", str(args.parallel), "--ctx", str(args.ctx), "--queue", str(args.queue),
    ] + args.server_arg
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.monotonic() + args.startup_timeout
    base = None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            base = m.group(1)
            break
    if base is None:
        proc.kill()
        log.close()
        sys.exit(f"serve_load: the server did not start; see {log_path}: {' '.join(cmd)}")
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, base
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"serve_load: /health never answered 200; see {log_path}")


SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 80},
        "summary": {"type": "string", "maxLength": 400},
        "mood": {"enum": ["happy", "sad", "tense", "calm"]},
    },
    "required": ["title", "summary", "mood"],
    "additionalProperties": False,
}

TOOLS = [{"type": "function", "function": {
    "name": "save_story",
    "description": "Saves a story with its title.",
    "parameters": {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 80},
                       "text": {"type": "string", "maxLength": 600}},
        "required": ["title", "text"],
    },
}}]

# What a constrained request adds to its body, by mix; the other half of the requests are free.
MIXES = {
    "free": None,
    "json": {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "story", "strict": True, "schema": SCHEMA}}},
    "tools": {"tools": TOOLS, "tool_choice": "required"},
}


def check_reply(extra, content, calls, finish):
    """Raises when a constrained reply that ended on its own is not what it was held to."""
    if extra is None or finish == "length":
        return
    if "response_format" in extra:
        v = json.loads(content)
        if set(v) != set(SCHEMA["required"]) or v["mood"] not in SCHEMA["properties"]["mood"]["enum"]:
            raise RuntimeError(f"the reply does not fit the schema: {content!r}")
    else:
        if finish != "tool_calls" or not calls or calls[0]["name"] != "save_story":
            raise RuntimeError(f"no save_story call (finish {finish}): {content!r} {calls}")
        json.loads(calls[0]["arguments"])


def stream_chat(base, model, prompt, max_tokens, timeout, extra=None):
    """One streaming chat request, `extra` merged into its body: (latency s, ttft s or None,
    completion tokens)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    body.update(extra or {})
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft = None
    tokens = None
    content, calls, finish = "", [], None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            choices = chunk.get("choices") or []
            if not choices:
                continue
            delta = choices[0].get("delta", {})
            finish = choices[0].get("finish_reason") or finish
            content += delta.get("content") or ""
            calls += [c["function"] for c in delta.get("tool_calls") or []]
            if ttft is None and (delta.get("content") or delta.get("tool_calls")):
                ttft = time.monotonic() - t0
    if tokens is None:
        raise RuntimeError("the stream had no usage")
    check_reply(extra, content, calls, finish)
    return time.monotonic() - t0, ttft, tokens


def scrape(base):
    """The server's Prometheus samples as {name: value}."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def run_level(base, model, clients, requests, max_tokens, timeout, mix="free"):
    """`clients` threads × `requests` sequential requests each; with a constrained `mix`, every
    other request is constrained that way."""
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        for j in range(requests):
            prompt = PROMPTS[(i + j) % len(PROMPTS)]
            extra = MIXES[mix] if (i + j) % 2 == 1 else None
            try:
                r = stream_chat(base, model, prompt, max_tokens, timeout, extra)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                with lock:
                    errors.append(f"client {i} request {j}: {e}")

    before = scrape(base)
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    after = scrape(base)
    lat = [r[0] for r in results]
    ttft = [r[1] for r in results if r[1] is not None]
    tokens = sum(r[2] for r in results)
    steps = after["wgllm_steps_total"] - before["wgllm_steps_total"]
    server_tokens = after["wgllm_generated_tokens_total"] - before["wgllm_generated_tokens_total"]
    return {
        "mix": mix,
        "clients": clients,
        "requests": len(results),
        "errors": errors,
        "wall_s": wall,
        "req_per_s": len(results) / wall,
        "latency_p50_s": percentile(lat, 50),
        "latency_p99_s": percentile(lat, 99),
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "completion_tokens": tokens,
        "agg_tokens_per_s": tokens / wall,
        "tokens_per_step": server_tokens / steps if steps else None,
    }


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wgllm", required=True, help="path of the wgllm binary")
    ap.add_argument("--model", required=True, help="GGUF file (or known model name)")
    ap.add_argument("--out", required=True, help="directory for serve_load.{json,md} and the server log")
    ap.add_argument("--clients", default="1,4,8", help="concurrency levels, comma-separated")
    ap.add_argument("--requests", type=int, default=20, help="requests per client per level")
    ap.add_argument("--max-tokens", type=int, default=128, help="max_tokens of each request")
    ap.add_argument("--parallel", type=int, default=8, help="server slots (--parallel)")
    ap.add_argument("--ctx", type=int, default=1024, help="context of each slot (--ctx)")
    ap.add_argument("--queue", type=int, default=64, help="server queue (--queue)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request")
    ap.add_argument("--startup-timeout", type=float, default=300, help="seconds to wait for /health")
    ap.add_argument("--min-ratio", type=float, default=None,
                    help="fail unless tokens/s at the highest concurrency >= this × at 1 client")
    ap.add_argument("--mixes", default="free",
                    help="request mixes, comma-separated: free; json (every other request held "
                         "to a json_schema); tools (every other one must call a tool)")
    ap.add_argument("--min-mix-ratio", type=float, default=None,
                    help="fail unless every constrained mix's tokens/s at the highest concurrency "
                         ">= this × the free mix's")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for `wgllm serve` (repeatable), e.g. --server-arg=--backend=cpu")
    args = ap.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    os.makedirs(args.out, exist_ok=True)
    proc, base = start_server(args, os.path.join(args.out, "server.log"))
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
            model = json.load(r)["data"][0]["id"]
        # Warm-up: pipelines and caches, one request per slot at once.
        run_level(base, model, min(args.parallel, max(levels)), 1, 8, args.timeout)
        rows = []
        mixes = args.mixes.split(",")
        for mix in mixes:
            if mix not in MIXES:
                sys.exit(f"serve_load: unknown mix '{mix}' (free, json, tools)")
        # The constrained mixes only at the highest concurrency, after the free levels.
        runs = [("free", c) for c in levels] if "free" in mixes else []
        runs += [(m, max(levels)) for m in mixes if m != "free"]
        for mix, c in runs:
            print(f"serve_load: {mix}, {c} clients x {args.requests} requests ...", file=sys.stderr, flush=True)
            rows.append(run_level(base, model, c, args.requests, args.max_tokens, args.timeout, mix))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    free = [r for r in rows if r["mix"] == "free"] or rows
    one = next((r for r in free if r["clients"] == 1), None)
    top = max(free, key=lambda r: r["clients"])
    ratio = top["agg_tokens_per_s"] / one["agg_tokens_per_s"] if one and one["agg_tokens_per_s"] else None
    mix_ratio = {r["mix"]: r["agg_tokens_per_s"] / top["agg_tokens_per_s"]
                 for r in rows if r["mix"] != "free" and top["mix"] == "free" and top["agg_tokens_per_s"]}
    result = {
        "model": model,
        "server": {"parallel": args.parallel, "ctx": args.ctx, "queue": args.queue,
                   "extra": args.server_arg},
        "max_tokens": args.max_tokens,
        "requests_per_client": args.requests,
        "levels": rows,
        "ratio_top_vs_1": ratio,
        "ratio_mix_vs_free": mix_ratio,
    }
    with open(os.path.join(args.out, "serve_load.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [
        f"`wgllm serve` load test: {model}, --parallel {args.parallel}, --ctx {args.ctx}, "
        f"streaming chat, max_tokens {args.max_tokens}, temperature 0, "
        f"{args.requests} requests per client",
        "",
        "| mix | clients | requests | errors | req/s | latency p50 (s) | latency p99 (s) | TTFT p50 (s) "
        "| TTFT p99 (s) | aggregate tokens/s | tokens per step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['mix']} | {r['clients']} | {r['requests']} | {len(r['errors'])} | {fmt(r['req_per_s'])} "
            f"| {fmt(r['latency_p50_s'])} | {fmt(r['latency_p99_s'])} | {fmt(r['ttft_p50_s'])} "
            f"| {fmt(r['ttft_p99_s'])} | {fmt(r['agg_tokens_per_s'], 1)} | {fmt(r['tokens_per_step'], 2)} |")
    lines += ["", f"aggregate tokens/s at {top['clients']} clients / at 1 client: {fmt(ratio, 2)}"]
    for m, q in mix_ratio.items():
        lines.append(f"aggregate tokens/s at {top['clients']} clients, mix {m} / free: {fmt(q, 2)}")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "serve_load.md"), "w") as f:
        f.write(md)
    print(md)
    errors = [e for r in rows for e in r["errors"]]
    for e in errors[:10]:
        print("error:", e, file=sys.stderr)
    ok = not errors and (args.min_ratio is None or (ratio is not None and ratio >= args.min_ratio))
    if args.min_mix_ratio is not None:
        ok = ok and all(q >= args.min_mix_ratio for q in mix_ratio.values())
        ok = ok and len(mix_ratio) == len([m for m in mixes if m != "free"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
