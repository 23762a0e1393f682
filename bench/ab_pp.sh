#!/bin/bash
# Issue 6: prompt processing of two wgllm binaries side by side on one GPU (A/B): per model,
# pp512 with and without cooperative matrices (the coop products and attention: on by default
# now; older binaries took `--experimental` to turn them on, which `coop_flags` finds out),
# each binary in turn, then the new binary's pp512 step profile per model with them
# (`--profile-tokens 512`: products, attention and the rest, kernel family by kernel family)
# and the 8B's pp4096. First the op table with the new binary, with and without them. About
# 3-4 minutes on an H200 (bench/results/2026-12-01-h200-prefill.md was measured this way).
#
#   OUT=bench/out-pp bash bench/ab_pp.sh .devbin/wgllm .devbin/wgllm-base
#
# (with each binary's commit in .devbin/wgllm.commit and .devbin/wgllm-base.commit, if wanted).
#
# Models: the synthetic SmolLM2-135M Q4_1, llama-3.2-1b Q4_0 and llama-3.1-8b Q4_0 in
# /tmp/wgllm-bench (written here when missing, as bench/run_h200.sh names them). Run from the
# repository root; everything goes under $OUT (default bench/out-pp), summary.txt the key lines
# (the rest packed into files.tgz at the end).
# R repetitions per row (default 3).

set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
ab_start ab_pp.sh bench/out-pp "$@"
MODELS=(smollm2-q4_1 l1b-q4_0 l8b-q4_0)
# The flags that turn cooperative matrices on or off for a binary: `--coop off` and nothing
# where it has `--coop`, else nothing and `--experimental`.
coop_flags() { # binary on|off
    if "$1" bench --help 2>/dev/null | grep -q -- "--coop"; then
        [ "$2" = off ] && echo "--coop off"
    else
        [ "$2" = on ] && echo "--experimental"
    fi
}
timeout 300 "$NEW" ops $(coop_flags "$NEW" off) >"$OUT/ops.txt" 2>&1
log "op table (new, no coop): $(tail -1 "$OUT/ops.txt")"
timeout 300 "$NEW" ops $(coop_flags "$NEW" on) >"$OUT/ops-coop.txt" 2>&1
log "op table (new, coop): $(tail -1 "$OUT/ops-coop.txt")"
grep -hE "FAIL|ERROR" "$OUT/ops.txt" "$OUT/ops-coop.txt" | head -10 | tee -a "$S"
wait

pp() { # binary model [flags] → the pp512 row's "mean ± stddev"
    local bin=$1 m=$2
    shift 2
    "$bin" bench -m "$M/$m.gguf" -p 512 -n 0 -r "$R" --unchecked-shaders "$@" 2>/dev/null |
        grep "| pp512" | awk -F'|' '{print $8}'
}
log "| model | pp512 base | pp512 new | coop base | coop new |"
log "| --- | ---: | ---: | ---: | ---: |"
for m in "${MODELS[@]}"; do
    log "| $m | $(pp "$BASE" "$m" $(coop_flags "$BASE" off)) | $(pp "$NEW" "$m" $(coop_flags "$NEW" off)) | $(pp "$BASE" "$m" $(coop_flags "$BASE" on)) | $(pp "$NEW" "$m" $(coop_flags "$NEW" on)) |"
done
for m in "${MODELS[@]}"; do
    "$NEW" bench -m "$M/$m.gguf" -p 512 -n 0 -r 1 --unchecked-shaders $(coop_flags "$NEW" on) \
        --profile --profile-tokens 512 --profile-steps 2 >"$OUT/profile-$m.md" 2>&1
    log "## $m pp512 step (new, coop)"
    grep "token step profile" "$OUT/profile-$m.md" | cut -c1-200 | tee -a "$S"
    grep "^| " "$OUT/profile-$m.md" | sed -n '3,6p' | grep -v pp512 | tee -a "$S"
done
log "8B pp4096 (new, coop): $("$NEW" bench -m "$M/l8b-q4_0.gguf" -p 4096 -n 0 -r 1 \
    --unchecked-shaders $(coop_flags "$NEW" on) -c 4200 2>/dev/null | grep "| pp4096" | awk -F'|' '{print $8}')"
