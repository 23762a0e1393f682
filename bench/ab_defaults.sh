#!/bin/bash
# Two wgllm binaries side by side on one GPU at the default flags a user gets: the op table
# against the CPU reference with the new binary (`wgllm ops`), then per model pp512 and tg128
# (`wgllm bench -p 512 -n 128 -r R`), each binary in turn, two rounds (the spread between them
# is the noise), and the ratio new / base of each round. Used to hold a refactor to the speed of
# the build before it.
#
#   OUT=bench/out-ab bash bench/ab_defaults.sh .devbin/wgllm .devbin/wgllm-base
#
# Models: the synthetic SmolLM2-135M Q4_1, llama-3.2-1b Q4_0 and llama-3.1-8b Q4_0 in
# /tmp/wgllm-bench (written when missing). Run from the repository root; summary.txt under $OUT
# holds the tables, the rest is packed into files.tgz at the end.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
ab_start ab_defaults.sh bench/out-ab "$@"
timeout 300 "$NEW" ops >"$OUT/ops.txt" 2>&1
log "op table (new): $(tail -1 "$OUT/ops.txt")"
grep -hE "FAIL|ERROR" "$OUT/ops.txt" | head -10 | tee -a "$S"
wait

rate() { # file test → the test row's t/s mean
    grep "| $2 |" "$1" | awk -F'|' '{print $8}' | awk '{print $1}' | tr -d ','
}
log "| model | round | pp512 base | pp512 new | new/base | tg128 base | tg128 new | new/base |"
log "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for name in "${MODELS[@]}"; do
    have_model "$name" || continue
    for round in 1 2; do
        for ab in "new:$NEW" "base:$BASE"; do
            "${ab#*:}" bench -m "$file" -p 512 -n 128 -r "$R" >"$OUT/$name-${ab%%:*}-$round.md" 2>&1
        done
        b=$OUT/$name-base-$round.md
        n=$OUT/$name-new-$round.md
        pb=$(rate "$b" pp512) pn=$(rate "$n" pp512) tb=$(rate "$b" tg128) tn=$(rate "$n" tg128)
        ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }
        log "| $name | $round | $pb | $pn | $(ratio "$pn" "$pb") | $tb | $tn | $(ratio "$tn" "$tb") |"
    done
done
