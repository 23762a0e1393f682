#!/bin/bash
# Issue 6: token generation of two wgllm binaries side by side on one GPU (A/B), so a change's
# effect is measured in one run: per model, tg128 at ctx 640 and at ctx 4224 (`wgllm run`'s
# 4,096-token default plus room: the whole-cache attention a step used to take), and
# `tg128 @ d4096` (the split attention past 1,024 keys), each binary in turn, twice (the spread
# between the rounds is the noise); then the new binary's decode-step profile (dispatches per
# token). First the FUSED op cases on the GPU with the new binary. About 5-8 minutes.
#
#   OUT=bench/out-ab bash bench/ab_tg.sh .devbin/wgllm .devbin/wgllm-base
#
# (with each binary's commit in .devbin/wgllm.commit and .devbin/wgllm-base.commit, if wanted).
#
# Models: the synthetic SmolLM2-135M Q4_1, llama-3.2-1b Q4_0 and llama-3.1-8b Q4_0 in
# /tmp/wgllm-bench (written here when missing, as bench/run_h200.sh names them). Run from the
# repository root; everything goes under $OUT (default bench/out-ab), summary.txt the key lines
# (the rest packed into files.tgz at the end).

set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
ab_start ab_tg.sh bench/out-ab "$@"
"$NEW" ops --filter FUSED >"$OUT/ops-fused.txt" 2>&1
log "FUSED op cases (new): $(tail -1 "$OUT/ops-fused.txt")"
wait

tg() { # label binary file name [flags] → the tg row's "mean ± stddev"
    local label=$1 bin=$2 file=$3 name=$4
    shift 4
    local f="$OUT/$name-$label"
    "$bin" bench -m "$file" -p 0 -n 128 -r "$R" --unchecked-shaders "$@" >"$f.md" 2>"$f.err"
    local row
    row=$(grep "| tg128" "$f.md" | awk -F'|' '{print $7 "|" $8}' | tr '\n' ' ')
    log "$name $label: ${row:-FAILED ($(tail -1 "$f.err"))}"
}

for name in "${MODELS[@]}"; do
    have_model "$name" || continue
    for round in 1 2; do
        for ab in "new:$NEW" "base:$BASE"; do
            label=${ab%%:*}
            bin=${ab#*:}
            tg "c640-$label-$round" "$bin" "$file" "$name" -c 640
            tg "c4224-$label-$round" "$bin" "$file" "$name" -c 4224
            tg "d4096-$label-$round" "$bin" "$file" "$name" -d 4096 -c 4224
        done
    done
    "$NEW" bench -m "$file" -p 0 -n 4 -r 1 --profile --unchecked-shaders >"$OUT/$name-profile.md" 2>&1
    log "$name profile (new): $(grep -o '[0-9]* dispatches per step[^;]*;[^;]*;' "$OUT/$name-profile.md")"
done
