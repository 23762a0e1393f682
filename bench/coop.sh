#!/bin/bash
# Issue 6 part 2 on an NVIDIA GPU over Vulkan: the cooperative-matrix prefill kernel
# (mul_mat_coop.wgsl, on by default, off with --coop off) checked against the CPU reference, then timed
# against torch.matmul fp16 (cuBLAS) in the same run (and against the tiled kernel with
# TILED=1), pp512 of a Llama 3.1 8B Q4_0 with it (and without it with TILED=1), and that 8B's
# perplexity on a piece of README.md with and without it: the op table checks no product
# large enough for the widest coop tiles whole, the 8B's layers (up to 14336 rows, 512
# columns) are such products, so both perplexities must agree. About 5-7 minutes.
#
#   OUT=bench/out-coop bash bench/coop.sh .devbin/wgllm
#
# Run from the repository root; the Vulkan loader .debs are taken from .gl/ when the host has no
# loader (as bench/run_h200.sh). The 8B file is $MODEL (default /tmp/wgllm-bench/l8b-q4_0.gguf,
# where run_h200.sh leaves it); when missing it is synthesized meanwhile (given up after 7 min).
# PP=0 skips that step and the perplexities.
# Everything goes under $OUT (default bench/out-coop); summary.txt collects the key lines.

set -u
cd "$(dirname "$0")/.."
W=${1:?usage: bench/coop.sh PATH/TO/wgllm}
OUT=${OUT:-bench/out-coop}
. bench/gpu_env.sh
start_summary "$OUT"
COOP=(--unchecked-shaders)
# The tiled kernels: cooperative matrices off.
TILE=(--coop off --unchecked-shaders)
# PP=0 skips the pp512 step (and the synthesis of its model).
PP=${PP:-1}
# TILED=1 times the tiled kernel too (shapes and pp512).
TILED=${TILED:-0}
M=${MODEL:-/tmp/wgllm-bench/l8b-q4_0.gguf}
# A file of under 4 GB is some smaller test's: synthesized anew over it.
big() { [ "$(stat -c %s "$M" 2>/dev/null || echo 0)" -ge 4000000000 ]; }
SYNTH=
if [ "$PP" = 1 ] && ! big; then
    mkdir -p "$(dirname "$M")"
    rm -f "$M.part"
    timeout 420 "$W" synth --preset llama-3.1-8b --dtype q4_0 -o "$M.part" >"$OUT/synth.txt" 2>&1 &
    SYNTH=$!
fi

log "# $(date -u +%F) $(cat .devbin/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"
log "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
"$W" devices >"$OUT/devices.txt" 2>&1
grep -i "cooperative" "$OUT/devices.txt" | head -3 | tee -a "$S"

# 1. Correctness: every MUL_MAT case (the prefill ones take the coop kernel), the fusions, and
# the prefill cases once more with wgpu's bounds checks on.
run_ops() { # name flags...
    local name=$1
    shift
    timeout 480 "$W" ops "$@" >"$OUT/ops-$name.txt" 2>&1
    local rc=$?
    log "ops $name (rc $rc): $(tail -1 "$OUT/ops-$name.txt")"
    grep -E "FAIL|ERROR|unsupported:" "$OUT/ops-$name.txt" | head -20 | tee -a "$S"
}
run_ops mul_mat "${COOP[@]}" --filter MUL_MAT
run_ops fused "${COOP[@]}" --filter FUSED
run_ops prefill-checked --filter "(prefill)"

# 2. Speed: one shape per process, with the coop kernel (and with the tiled kernel it replaces).
SHAPES=(
    "f16 x f32 k=4096 m=4096 n=4096"
    "f16 x f32 k=4096 m=4096 n=512"
    "f16 x f32 k=4096 m=14336 n=512"
    "q4_0 x f32 k=4096 m=4096 n=512"
    "q4_0 x f32 k=4096 m=14336 n=512"
    "q4_K x f32 k=4096 m=4096 n=512"
    "q4_K x f32 k=4096 m=14336 n=512"
)
: >"$OUT/large-coop.txt"
: >"$OUT/large-tiled.txt"
for s in "${SHAPES[@]}"; do
    timeout 120 "$W" ops --large "${COOP[@]}" --filter "MUL_MAT $s" 2>&1 |
        grep "^| MUL_MAT" >>"$OUT/large-coop.txt"
    [ "$TILED" = 1 ] || continue
    timeout 120 "$W" ops --large "${TILE[@]}" --filter "MUL_MAT $s" 2>&1 |
        grep "^| MUL_MAT" >>"$OUT/large-tiled.txt"
done
log "## coop (--unchecked-shaders): | case | check | us | GB/s | of copy | GFLOP/s |"
tee -a "$S" <"$OUT/large-coop.txt"
if [ "$TILED" = 1 ]; then
    log "## tiled (--coop off --unchecked-shaders)"
    tee -a "$S" <"$OUT/large-tiled.txt"
fi
log "## torch.matmul fp16 vs the coop kernel"
python3 bench/torch_matmul.py --wgllm "$OUT/large-coop.txt" 2>&1 | tee -a "$S"

# 3. pp512 of Llama 3.1 8B Q4_0 with cooperative matrices (and without with TILED=1), then its
# perplexity with and without them (the file synthesized in the background since the start
# when it was missing).
if [ -n "$SYNTH" ]; then
    if wait "$SYNTH"; then
        mv "$M.part" "$M"
    fi
fi
if [ "$PP" = 1 ] && big; then
    modes=(coop)
    [ "$TILED" = 1 ] && modes+=(tiled)
    for mode in "${modes[@]}"; do
        flags=(--unchecked-shaders)
        [ $mode = tiled ] && flags+=(--coop off)
        timeout 240 "$W" bench -m "$M" -p 512 -n 0 -r 3 "${flags[@]}" >"$OUT/pp512-$mode.txt" 2>&1
        log "## pp512 8B q4_0, $mode (rc $?)"
        grep -E "pp512|error" "$OUT/pp512-$mode.txt" | tee -a "$S"
    done
    # Two 512-token chunks (the synthetic vocabulary is one token per byte), each one
    # 512-column product per layer weight. The per-chunk figures depend on which logits come
    # out where: a wrong tile moves them by percents, f16 rounding by far less than 0.5%.
    head -c 1100 README.md >"$OUT/ppl.txt"
    for mode in coop tiled; do
        flags=(--unchecked-shaders)
        [ $mode = tiled ] && flags+=(--coop off)
        timeout 120 "$W" perplexity -m "$M" -f "$OUT/ppl.txt" -c 512 --ubatch 512 "${flags[@]}" \
            >"$OUT/ppl-$mode.txt" 2>&1
        log "## perplexity 8B q4_0, $mode (rc $?): $(grep -E "\[1/|PPL|rror" "$OUT/ppl-$mode.txt" | tr '\n' ' ')"
    done
elif [ "$PP" = 1 ]; then
    log "pp512: no 8B q4_0 file (synth did not finish; see synth.txt in $OUT/files.tgz)"
fi
