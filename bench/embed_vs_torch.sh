#!/bin/bash
# Embedding speed on a GPU host (issue 37): `wgllm bench` and PyTorch fp16 (what
# sentence-transformers runs, bench/embed_torch.py) on the same synthetic encoder shapes,
# alternated twice, batches of 1, 32 and 256 inputs of 16, 128 and 512 tokens.
#   OUT=/path bench/embed_vs_torch.sh WGLLM_BINARY
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
B=${1:?usage: bench/embed_vs_torch.sh WGLLM_BINARY}
OUT=${OUT:-bench/out-embed}
start_summary "$OUT"
log "# $(date -u +%F) embeddings, wgllm $(commit "$B")"
mkdir -p "$M"
for preset in minilm-l6 bge-base; do
  f=$M/$preset-f16.gguf
  [ -s "$f" ] || "$B" synth --preset "$preset" --dtype f16 -o "$f" >"$OUT/synth-$preset.txt" 2>&1
  for round in 1 2; do
    "$B" bench -m "$f" -p 16,128,512 --batch 1,32,256 -r 5 -o json >"$OUT/$preset-wgllm-$round.json" 2>"$OUT/$preset-wgllm-$round.err"
    python3 bench/embed_torch.py --preset "$preset" --wgllm "$OUT/$preset-wgllm-$round.json" >"$OUT/$preset-torch-$round.md" 2>&1
    log "$preset round $round:"
    cat "$OUT/$preset-torch-$round.md" | tee -a "$S"
  done
done
