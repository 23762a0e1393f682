#!/bin/bash
# Issue 6, decode attention on an NVIDIA GPU over Vulkan: every FLASH_ATTN_EXT op case checked
# against the CPU reference (decode cases take flash_attn_vec.wgsl), then Llama 3.1 8B's decode
# attention (32 query heads, 8 KV heads, d = 128, f16 cache) over a 512-row cache with only 12
# keys written (the other 500 -inf: the short-context cost, as a model runs early in a
# generation), 4,096 and 32,768 keys, one shape per process, as GB/s of K/V read and a fraction
# of a 256 MiB copy in the same run. About 2 minutes.
#
#   OUT=bench/out-attn bash bench/flash_attn.sh .devbin/wgllm
#
# Run from the repository root; the Vulkan loader .debs are taken from .gl/ when the host has no
# loader (as bench/run_h200.sh). Everything goes under $OUT (default bench/out-attn);
# summary.txt collects the key lines.

set -u
cd "$(dirname "$0")/.."
W=${1:?usage: bench/flash_attn.sh PATH/TO/wgllm}
OUT=${OUT:-bench/out-attn}
. bench/gpu_env.sh
start_summary "$OUT"

log "# $(date -u +%F) $(cat .devbin/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"
log "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# 1. Correctness, with and without wgpu's bounds checks.
for mode in checked unchecked; do
    flags=()
    [ "$mode" = unchecked ] && flags=(--unchecked-shaders)
    timeout 300 "$W" ops "${flags[@]}" --filter FLASH_ATTN >"$OUT/ops-$mode.txt" 2>&1
    log "ops FLASH_ATTN $mode (rc $?): $(tail -1 "$OUT/ops-$mode.txt")"
    grep -E "FAIL|ERROR|unsupported:" "$OUT/ops-$mode.txt" | head -20 | tee -a "$S"
done

# 2. Speed: one shape per process (each run times the copy it is compared with).
log "| case | check | us | GB/s | of copy | GFLOP/s |"
for n in 512 4096 32768; do
    timeout 120 "$W" ops --large --unchecked-shaders --filter "n_kv=$n heads" \
        >"$OUT/large-$n.txt" 2>&1
    grep -E "^\| (COPY|FLASH)" "$OUT/large-$n.txt" | tee -a "$S"
done
