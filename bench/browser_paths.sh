#!/bin/bash
# The kernels a browser runs, timed on this GPU beside the native ones, in one run: a browser's
# WebGPU has neither subgroups (wgpu's WGSL cannot enable them there) nor cooperative matrices,
# so `--subgroups off --coop off` takes the paths every browser user's prefill and decode take.
# Per model, pp512 and tg128 (-r $R) natively and browser-like, each in turn, twice (the spread
# between rounds is the noise), then one browser-like decode step's profile; then the large
# mat-vec and attention op cases (`ops --large`) both ways, and the op table browser-like.
# About 6-9 minutes.
#
#   OUT=bench/out-browser bash bench/browser_paths.sh .devbin/wgllm
#
# Models: the synthetic SmolLM2-135M Q4_1, llama-3.2-1b Q4_0 and llama-3.1-8b Q4_0 in
# /tmp/wgllm-bench (written here when missing, as bench/run_h200.sh names them). Run from the
# repository root; everything goes under $OUT (default bench/out-browser), summary.txt the key
# lines, the rest packed into files.tgz at the end. A quick local try of the script itself
# (lavapipe, no `ops --large`): LARGE=0 R=1 P=8 N=4 bash bench/browser_paths.sh target/debug/wgllm

set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
W=${1:?usage: bench/browser_paths.sh WGLLM}
OUT=${OUT:-bench/out-browser}
R=${R:-3}
P=${P:-512}
N=${N:-128}
BROWSER=(--subgroups off --coop off)
start_summary "$OUT"
log "# $(date -u +%F) $W ($(commit "$W")): native against browser-like (${BROWSER[*]})"
synth_models "$W"
"$W" ops "${BROWSER[@]}" >"$OUT/ops-browser.txt" 2>&1
log "op table, browser-like: $(tail -1 "$OUT/ops-browser.txt")"
for way in native browser; do
    [ "${LARGE:-1}" = 1 ] || break
    flags=()
    [ $way = browser ] && flags=("${BROWSER[@]}")
    "$W" ops --large "${flags[@]}" >"$OUT/ops-large-$way.txt" 2>&1
    log "ops --large ($way): $(tail -1 "$OUT/ops-large-$way.txt")"
done
wait

bench() { # label file name [flags] → the pp and tg rows' "mean ± stddev"
    local label=$1 file=$2 name=$3
    shift 3
    local f="$OUT/$name-$label"
    "$W" bench -m "$file" -p "$P" -n "$N" -r "$R" -c 640 --unchecked-shaders "$@" >"$f.md" \
        2>"$f.err"
    local rows
    rows=$(grep -E "\| (pp|tg)[0-9]+ " "$f.md" | awk -F'|' '{printf "%s %s;", $7, $8}')
    log "$name $label: ${rows:-FAILED ($(tail -1 "$f.err"))}"
}

for name in "${MODELS[@]}"; do
    have_model "$name" || continue
    for round in 1 2; do
        bench "native-$round" "$file" "$name"
        bench "browser-$round" "$file" "$name" "${BROWSER[@]}"
    done
    "$W" bench -m "$file" -p 0 -n 4 -r 1 --profile --unchecked-shaders "${BROWSER[@]}" \
        >"$OUT/$name-profile-browser.md" 2>&1
    log "$name profile (browser-like): $(grep -o '[0-9]* dispatches per step[^;]*;[^;]*;' \
        "$OUT/$name-profile-browser.md")"
done
