#!/usr/bin/env bash
# Language detection and translation against whisper.cpp on synthetic multilingual models
# (Whisper tiny's shapes, random q8_0 weights: `wgllm synth`), written back in whisper.cpp's
# format (`wgllm convert X.gguf -o X.bin`) so both run the same weights. For each seed, whisper-cli
# 1.8.5 (CPU, greedy, no fallback) detects the language of jfk.wav and translates it; the
# detected language and the token ids go to crates/speech/tests/fixtures/synthetic_multilingual.json.
#
# Usage: scripts/whisper/gen_synth_fixtures.sh [WGLLM [WHISPER_CLI]]
#   WGLLM        the wgllm binary (default target/debug/wgllm)
#   WHISPER_CLI  whisper.cpp's CPU whisper-cli (default: built by gen_fixtures.sh build,
#                /tmp/wh/pywhispercpp-1.5.1/whisper.cpp/build/bin/whisper-cli)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WGLLM=${1:-$REPO/target/debug/wgllm}
CLI=${2:-/tmp/wh/pywhispercpp-1.5.1/whisper.cpp/build/bin/whisper-cli}
FIX=$REPO/crates/speech/tests/fixtures
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cases=()
for seed in 2 3 4; do
  "$WGLLM" synth --preset whisper-tiny --dtype q8_0 --seed "$seed" -o "$TMP/s$seed.gguf" >/dev/null
  "$WGLLM" convert "$TMP/s$seed.gguf" -o "$TMP/s$seed.bin" >/dev/null
  "$CLI" -m "$TMP/s$seed.bin" -f "$FIX/audio/jfk.wav" -t 2 -bs 1 -bo 1 -nf -l auto -tr \
    -ojf -of "$TMP/s$seed" >"$TMP/s$seed.log" 2>&1
  cases+=("$seed")
done
python3 - "$TMP" "$FIX/synthetic_multilingual.json" "${cases[@]}" <<'PY'
import json, re, sys
tmp, out, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
res = []
for seed in seeds:
    log = open(f"{tmp}/s{seed}.log", errors="replace").read()
    lang, p = re.search(r"auto-detected language: (\w+) \(p = ([0-9.]+)\)", log).groups()
    d = json.load(open(f"{tmp}/s{seed}.json"))
    res.append({
        "preset": "whisper-tiny", "dtype": "q8_0", "seed": int(seed), "language": lang,
        "language_p": float(p),
        "segments": [{"t0_ms": s["offsets"]["from"], "t1_ms": s["offsets"]["to"],
                      "tokens": [t["id"] for t in s["tokens"]]} for s in d["transcription"]],
    })
doc = {"whisper_cpp_version": "1.8.5", "clip": "jfk.wav",
       "flags": ["-t", "2", "-bs", "1", "-bo", "1", "-nf", "-l", "auto", "-tr"], "cases": res}
with open(out, "w") as f:
    f.write("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "cases"))
    f.write(',\n  "cases": [\n' + ",\n".join("    " + json.dumps(c) for c in res) + "\n  ]\n}\n")
print(f"wrote {out}: " + ", ".join(f"seed {c['seed']}: {c['language']}" for c in res))
PY
