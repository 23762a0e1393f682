#!/bin/bash
# Structured output under load on a GPU host (issue 39): bench/serve_load.py over `wgllm serve`
# with 8 slots, free requests at 1 and 8 clients, then 8 clients with every other request held to
# a JSON schema (json) and with every other one made to call a tool (tools). The model has
# SmolLM2-135M's shapes and Q4_1 weights, random, with SmolLM2's real tokenizer and chat template
# (`wgllm synth --vocab-from`), so grammars and templates behave as on the real model; VOCAB is a
# GGUF holding SmolLM2's `tokenizer.*` keys (bench/results/ says how it was made).
#   OUT=/path bench/serve_structured.sh WGLLM_BINARY VOCAB_GGUF
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
B=${1:?usage: bench/serve_structured.sh WGLLM_BINARY VOCAB_GGUF}
V=${2:?usage: bench/serve_structured.sh WGLLM_BINARY VOCAB_GGUF}
OUT=${OUT:-bench/out-serve}
start_summary "$OUT"
log "# $(date -u +%F) serve_load with structured mixes, wgllm $(commit "$B")"
mkdir -p "$M"
f=$M/smollm2-vocab-q4_1.gguf
[ -s "$f" ] || "$B" synth --preset smollm2-135m --dtype q4_1 --vocab-from "$V" -o "$f" >"$OUT/synth.txt" 2>&1
python3 bench/serve_load.py --wgllm "$B" --model "$f" --out "$OUT" --clients 1,8 --requests 20 \
  --max-tokens 128 --parallel 8 --mixes free,json,tools --min-mix-ratio 0.85 >"$OUT/serve_load.txt" 2>&1
log "serve_load exit status $?"
tee -a "$S" <"$OUT/serve_load.md"
