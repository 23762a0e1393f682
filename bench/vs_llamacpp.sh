#!/bin/bash
# wgllm at default flags against llama.cpp's CUDA `llama-bench` on the same GPU (issue 36), in
# one device command: the synthetic files written (SmolLM2-135M Q4_1, Llama 3.2 1B and 3.1 8B
# Q4_0, Qwen3 8B Q4_K shapes), each timed by both programs, alternated twice: pp512 and tg128,
# then tg128 at depths 4,096 and 16,384; the ratio table (wgllm / llama.cpp, the better round of
# each) in $OUT/summary.txt, each program's JSON packed beside it.
#   OUT=/path bash bench/vs_llamacpp.sh WGLLM_BINARY LLAMA_BENCH_DIR
# LLAMA_BENCH_DIR holds llama-bench.xz.part* and SHA256 (shared/tools/llama-bench/); DEPTHS and
# R override the depths (comma list) and repetitions; Q4K=1 adds the Qwen3 8B Q4_K shape, whose
# synthesis (a single-threaded K-quant search) takes minutes: write it in an earlier call.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
B=${1:?usage: bench/vs_llamacpp.sh WGLLM_BINARY LLAMA_BENCH_DIR}
LBD=${2:?usage: bench/vs_llamacpp.sh WGLLM_BINARY LLAMA_BENCH_DIR}
OUT=${OUT:-bench/out-vs}
R=${R:-3}
DEPTHS=${DEPTHS:-4096,16384}
start_summary "$OUT"
log "# $(date -u +%F) wgllm $(commit "$B") against llama.cpp CUDA llama-bench, -r $R, depths $DEPTHS"
log "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
LB=/tmp/llama-bench
if [ ! -x "$LB" ]; then
  cat "$LBD"/llama-bench.xz.part* | xz -dc >"$LB" && chmod +x "$LB"
fi
want=$(awk '{print $1}' "$LBD/SHA256")
[ "$(sha256sum "$LB" | awk '{print $1}')" = "$want" ] || { log "llama-bench: sha256 differs from $LBD/SHA256"; exit 1; }

synth_models "$B"
if [ "${Q4K:-0}" = 1 ] && [ ! -s "$M/q8b-q4_k.gguf" ]; then
  timeout 540 "$B" synth --preset qwen3-8b --dtype q4_k -o "$M/q8b-q4_k.gguf.part" \
    >"$OUT/synth-q8b-q4_k.txt" 2>&1 && mv "$M/q8b-q4_k.gguf.part" "$M/q8b-q4_k.gguf" &
fi
wait
for name in smollm2-q4_1 l1b-q4_0 l8b-q4_0 q8b-q4_k; do
  have_model "$name" || continue
  for round in 1 2; do
    "$LB" -m "$file" -p 512 -n 128 -fa 1 -r "$R" -o json >"$OUT/lb-$name-$round.json" 2>"$OUT/lb-$name-$round.err"
    "$LB" -m "$file" -p 0 -n 128 -d "$DEPTHS" -fa 1 -r "$R" -o json >"$OUT/lb-$name-$round-d.json" 2>>"$OUT/lb-$name-$round.err"
    "$B" bench -m "$file" -p 512 -n 128 -r "$R" -o json >"$OUT/w-$name-$round.json" 2>"$OUT/w-$name-$round.err"
    "$B" bench -m "$file" -p 0 -n 128 -d "$DEPTHS" -r "$R" -o json >"$OUT/w-$name-$round-d.json" 2>>"$OUT/w-$name-$round.err"
  done
done

# The table: per model and test, the better round of each program.
python3 - "$OUT" <<'EOF' | tee -a "$S"
import glob, json, os, sys
out = sys.argv[1]

def records(path):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return []
    return d if isinstance(d, list) else d.get("results", [])

def best(prefix):
    got = {}
    for p in glob.glob(os.path.join(out, prefix + "-*.json")):
        for r in records(p):
            key = ("pp%d" % r["n_prompt"]) if r["n_prompt"] else ("tg%d" % r["n_gen"])
            if r.get("n_depth"):
                key += " @ d%d" % r["n_depth"]
            got[key] = max(got.get(key, 0.0), r["avg_ts"])
    return got

print("| model | test | llama.cpp CUDA t/s | wgllm t/s | wgllm / llama.cpp |")
print("| --- | --- | ---: | ---: | ---: |")
for name in ["smollm2-q4_1", "l1b-q4_0", "l8b-q4_0", "q8b-q4_k"]:
    lb, w = best("lb-" + name), best("w-" + name)
    for test in sorted(set(lb) | set(w), key=lambda t: (not t.startswith("pp"), len(t), t)):
        a, b = lb.get(test), w.get(test)
        ratio = "%.2f" % (b / a) if a and b else "-"
        fmt = lambda v: "%.1f" % v if v else "-"
        print("| %s | %s | %s | %s | %s |" % (name, test, fmt(a), fmt(b), ratio))
EOF
