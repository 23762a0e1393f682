#!/bin/bash
# The encoder workloads kernel by kernel on a GPU host (issues 37, 38): `wgllm bench --profile`
# (default flags) on the synthetic Whisper tiny.en and large-v3-turbo shapes (one 30 s window's
# encoder) and on MiniLM-L6 (32 inputs of 128 and of 512 tokens), all f16.
#   Device: OUT=$OUT bench/encoders_profile.sh WGLLM_BINARY   (carry .gl and the binary)
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
B=${1:?usage: bench/encoders_profile.sh WGLLM_BINARY}
OUT=${OUT:-bench/out-encoders}
start_summary "$OUT"
log "# $(date -u +%F) encoder profiles, wgllm $(commit "$B")"
mkdir -p "$M"
for preset in whisper-tiny.en whisper-large-v3-turbo minilm-l6; do
  f=$M/$preset-f16.gguf
  [ -s "$f" ] || "$B" synth --preset "$preset" --dtype f16 -o "$f" >"$OUT/synth-$preset.txt" 2>&1
  case $preset in
    minilm*) args=(-p 128,512 --batch 32 -r 3) ;;
    *) args=(-r 3) ;;
  esac
  "$B" bench -m "$f" "${args[@]}" --profile >"$OUT/$preset.md" 2>&1
  tee -a "$S" <"$OUT/$preset.md"
done
