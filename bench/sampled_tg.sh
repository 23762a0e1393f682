#!/bin/bash
# Issue 6: sampled token generation against greedy on one GPU. First the SAMPLE op cases (the
# draw from top-k candidates) against the CPU reference on the GPU, then per model tg128 greedy,
# tg128 with `--sample` (`wgllm run`'s default sampler: temperature 0.8, top-k 40, top-p 0.95,
# min-p 0.05, each token drawn on the device and fed to the next step there, one step queued
# ahead) and greedy again (the spread between the two greedy runs is the noise). About 2-4 min.
#
#   OUT=bench/out-sampled bash bench/sampled_tg.sh .devbin/wgllm
#
# Models: /tmp/smollm2.gguf when present, else a synthetic SmolLM2-135M Q4_1; the synthetic
# llama-3.2-1b and llama-3.1-8b Q4_0 that bench/run_h200.sh leaves in /tmp/wgllm-bench (the 1B is
# synthesized here when missing, the 8B only used when present). Run from the repository root.
# Everything goes under $OUT (default bench/out-sampled); summary.txt collects the key lines.

set -u
cd "$(dirname "$0")/.."
W=${1:?usage: bench/sampled_tg.sh PATH/TO/wgllm}
OUT=${OUT:-bench/out-sampled}
R=${R:-5}
N=${N:-128}
. bench/gpu_env.sh
start_summary "$OUT"
M=/tmp/wgllm-bench
mkdir -p "$M"

log "# $(date -u +%F) $(cat .devbin/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"
"$W" ops --filter SAMPLE >"$OUT/ops.txt" 2>&1
log "SAMPLE op cases: $(tail -1 "$OUT/ops.txt")"

SMOL=/tmp/smollm2.gguf
if [ ! -s "$SMOL" ]; then
    SMOL=$M/smollm2-q4_1.gguf
    [ -s "$SMOL" ] || "$W" synth --preset smollm2-135m --dtype q4_1 -o "$SMOL" >"$OUT/synth.txt" 2>&1
fi
[ -s "$M/l1b-q4_0.gguf" ] ||
    timeout 300 "$W" synth --preset llama-3.2-1b --dtype q4_0 -o "$M/l1b-q4_0.gguf" >>"$OUT/synth.txt" 2>&1

tg() { # name file label [flags] → the tg row's "mean ± stddev"
    local name=$1 file=$2 label=$3
    shift 3
    "$W" bench -m "$file" -p 0 -n "$N" -r "$R" "$@" >"$OUT/$name-$label.md" 2>"$OUT/$name-$label.err"
    local row
    row=$(grep "| tg$N |" "$OUT/$name-$label.md" | awk -F'|' '{print $8}')
    log "$name tg$N $label: ${row:-FAILED ($(tail -1 "$OUT/$name-$label.err"))} t/s"
}

for pair in "smollm2:$SMOL" "llama-3.2-1b-q4_0:$M/l1b-q4_0.gguf" "llama-3.1-8b-q4_0:$M/l8b-q4_0.gguf"; do
    name=${pair%%:*}
    file=${pair#*:}
    if [ ! -s "$file" ]; then
        log "$name: no model at $file, skipped"
        continue
    fi
    tg "$name" "$file" greedy
    tg "$name" "$file" sampled --sample
    tg "$name" "$file" greedy2
done
