#!/bin/bash
# The acceptance table of issue 5 on one NVIDIA GPU over Vulkan, in one command of under ~8 min:
# pp512 / tg128 (-r 3) with the bandwidth roofline for SmolLM2-135M Q4_1, Gemma 3 270M, and
# synthetic llama-3.2-1b Q4_0, llama-3.1-8b Q4_0 and Q4_K; the --profile breakdown of one 8B Q4_0
# decode step; and PyTorch bf16 side by side when torch is installed.
#
#   bash bench/run_h200.sh [extra `wgllm bench` flags, e.g. --unchecked-shaders]
#   bash bench/run_h200.sh --synth-only   # only write the synthetic models (up to 9.5 min)
#
# Synthetic models are written to /tmp/wgllm-bench and reused while the machine stays up, so
# when `wgllm synth` of the 8B Q4_K file (single-threaded K-quant search) cannot finish within
# the deadline, run --synth-only first and then the benchmark in a second command.
#
# Run from the repository root with the release binary at .devbin/wgllm (and its commit in
# .devbin/COMMIT if .git is absent) and the Vulkan loader .debs in .gl/. Real model files are used
# when present at /tmp/smollm2.gguf and /tmp/gemma3.gguf, else synthetic ones of the same shapes.
# Everything goes under $OUT (default bench/out): one .md and .json per model, profile, PyTorch
# tables, synth logs, and summary.md (date, commit, machine, all tables) for bench/results/.
# For a quick local try of the script itself: WGLLM=target/debug/wgllm P=8 N=4 R=1 DEADLINE=60.

set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
W=${WGLLM:-./.devbin/wgllm}
P=${P:-512}
N=${N:-128}
R=${R:-3}
SYNTH_ONLY=0
if [ "${1:-}" = "--synth-only" ]; then
    SYNTH_ONLY=1
    shift
fi
EXTRA=("$@")
START=$(date +%s)
# No new step starts after this many seconds, and synthesis is cut off then.
DEADLINE=${DEADLINE:-450}
[ $SYNTH_ONLY -eq 1 ] && DEADLINE=570
M=/tmp/wgllm-bench
mkdir -p "$M"

elapsed() { echo $(($(date +%s) - START)); }
log() { echo "[$(elapsed)s] $*" | tee -a "$OUT/log.txt"; }
left() { echo $((DEADLINE - $(elapsed))); }

. bench/gpu_env.sh

if ! "$W" bench --help >/dev/null 2>&1; then
    echo "error: $W has no 'bench' command; rebuild the release binary" | tee "$OUT/log.txt"
    exit 1
fi
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || cat .devbin/COMMIT 2>/dev/null || echo unknown)
{
    echo "# wgllm bench, $(date -u +%Y-%m-%d), commit $COMMIT"
    echo "# machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPU cores"
    echo "# flags: -p $P -n $N -r $R ${EXTRA[*]}"
} >"$OUT/machine.txt"
"$W" devices >>"$OUT/machine.txt" 2>&1

# Synthesize in the background: one process per file, cut off at the deadline.
declare -A PIDS
synth() { # name preset dtype
    local f="$M/$1.gguf"
    if [ -s "$f" ]; then return; fi
    (timeout "$(left)" "$W" synth --preset "$2" --dtype "$3" -o "$f.part" >"$OUT/synth-$1.txt" 2>&1 &&
        mv "$f.part" "$f") &
    PIDS[$1]=$!
}
await() { # name → 0 when $M/name.gguf is ready
    local pid=${PIDS[$1]:-}
    if [ -n "$pid" ]; then
        local t0; t0=$(elapsed)
        wait "$pid"
        if [ -s "$M/$1.gguf" ]; then
            log "synth $1 ready after waiting $(($(elapsed) - t0)) s: $(tail -1 "$OUT/synth-$1.txt")"
        else
            log "synth $1 failed or was cut off at the deadline: $(tail -1 "$OUT/synth-$1.txt")"
        fi
    fi
    [ -s "$M/$1.gguf" ]
}

SMOL=/tmp/smollm2.gguf
GEMMA=/tmp/gemma3.gguf
[ -s "$SMOL" ] || { synth smollm2-q4_1 smollm2-135m q4_1; SMOL=$M/smollm2-q4_1.gguf; }
# The real Gemma 3 270M "Q4_K_M" is mostly Q8_0 (embedding) and Q5_0 (its 640-wide rows are no
# whole Q4_K blocks); the stand-in is all Q8_0.
[ -s "$GEMMA" ] || { synth gemma3-q8_0 gemma3-270m q8_0; GEMMA=$M/gemma3-q8_0.gguf; }
synth l1b-q4_0 llama-3.2-1b q4_0
synth l8b-q4_0 llama-3.1-8b q4_0
synth l8b-q4_k llama-3.1-8b q4_k
log "synthesizing in the background"
if [ $SYNTH_ONLY -eq 1 ]; then
    for name in "${!PIDS[@]}"; do await "$name"; done
    ls -l "$M" | tee -a "$OUT/log.txt"
    exit 0
fi

bench() { # name file [flags]
    local name=$1 file=$2
    shift 2
    if [ "$(left)" -le 0 ]; then
        log "SKIPPED $name: past the ${DEADLINE}s deadline"
        return 1
    fi
    log "bench $name ($file)"
    timeout "$(($(left) + 60))" "$W" bench -m "$file" -p "$P" -n "$N" -r "$R" --json "$OUT/$name.json" \
        "$@" "${EXTRA[@]}" >"$OUT/$name.md" 2>"$OUT/$name.err"
    local rc=$?
    log "bench $name rc=$rc"
    cat "$OUT/$name.md"
    [ $rc -eq 0 ] || tail -3 "$OUT/$name.err"
}

TORCH=0
python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null && TORCH=1
torch_bench() { # preset
    if [ $TORCH -eq 1 ] && [ "$(left)" -gt 60 ]; then
        log "pytorch $1"
        timeout "$(($(left) + 30))" python3 bench/pytorch_bench.py --preset "$1" -p "$P" -n "$N" -r "$R" \
            --save-json "$OUT/torch-$1.json" >"$OUT/torch-$1.log" 2>&1
        log "pytorch $1 rc=$?"
    fi
}
compare() { # preset wgllm-json...
    local preset=$1
    shift
    [ -s "$OUT/torch-$preset.json" ] || return 0
    local args=()
    for j in "$@"; do [ -s "$j" ] && args+=(--wgllm "$j"); done
    python3 bench/pytorch_bench.py --preset "$preset" -p "$P" -n "$N" --torch-json "$OUT/torch-$preset.json" \
        "${args[@]}" | tee "$OUT/torch-$preset.md"
}

await smollm2-q4_1 || true
bench smollm2 "$SMOL"
await gemma3-q8_0 || true
bench gemma3-270m "$GEMMA"
await l1b-q4_0 && bench llama-3.2-1b-q4_0 "$M/l1b-q4_0.gguf"
await l8b-q4_0 && bench llama-3.1-8b-q4_0 "$M/l8b-q4_0.gguf" --profile
# The GPU is free while the Q4_K file is still being written.
torch_bench llama-3.2-1b
torch_bench llama-3.1-8b
await l8b-q4_k && bench llama-3.1-8b-q4_k "$M/l8b-q4_k.gguf"
[ -s "$M/l8b-q4_k.gguf" ] || log "llama-3.1-8b Q4_K: synthesis did not finish by ${DEADLINE}s"
for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done

{
    cat "$OUT/machine.txt"
    for name in smollm2 gemma3-270m llama-3.2-1b-q4_0 llama-3.1-8b-q4_0 llama-3.1-8b-q4_k; do
        [ -s "$OUT/$name.md" ] && { echo; echo "## $name"; echo; cat "$OUT/$name.md"; }
    done
    for p in llama-3.2-1b llama-3.1-8b; do
        echo
        echo "## PyTorch $p"
        echo
        case $p in
            llama-3.2-1b) compare "$p" "$OUT/llama-3.2-1b-q4_0.json" ;;
            llama-3.1-8b) compare "$p" "$OUT/llama-3.1-8b-q4_0.json" "$OUT/llama-3.1-8b-q4_k.json" ;;
        esac
        [ $TORCH -eq 1 ] || echo "(skipped: no torch with CUDA here)"
    done
    echo
    echo "## log"
    cat "$OUT/log.txt"
} >"$OUT/summary.md"
log "done; summary in $OUT/summary.md"
