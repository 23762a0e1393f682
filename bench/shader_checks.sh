#!/bin/bash
# Issue 36: what the checked kernels pay for, at default flags otherwise. Per model, pp512 and
# tg128 with each `--shader-checks` mode (full: wgpu's default; bounds: bounds checks only, no
# loop bounding, unguarded integer division, workgroup memory not zeroed; off: none), the modes
# alternated, twice (the spread between rounds is the noise); the table in summary.txt.
#
#   OUT=bench/out-checks bash bench/shader_checks.sh .devbin/wgllm
#
# Models: the synthetic SmolLM2-135M Q4_1, Llama 3.2 1B and 3.1 8B Q4_0 (written into
# /tmp/wgllm-bench when missing). About 4 minutes on an H200.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
B=${1:?usage: bench/shader_checks.sh WGLLM}
OUT=${OUT:-bench/out-checks}
R=${R:-3}
start_summary "$OUT"
log "# $(date -u +%F) wgllm $(commit "$B"): --shader-checks full / bounds / off, -r $R"
log "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
synth_models "$B"
wait
for name in "${MODELS[@]}"; do
  have_model "$name" || continue
  for round in 1 2; do
    for mode in full bounds off; do
      "$B" bench -m "$file" -p 512 -n 128 -r "$R" --shader-checks "$mode" -o json \
        >"$OUT/$name-$mode-$round.json" 2>"$OUT/$name-$mode-$round.err"
    done
  done
done
python3 - "$OUT" <<'PY' | tee -a "$S"
import glob, json, os, sys
out = sys.argv[1]
best = {}
for p in glob.glob(os.path.join(out, "*.json")):
    name, mode, _ = os.path.basename(p)[:-5].rsplit("-", 2)
    try:
        rows = json.load(open(p))
    except ValueError:
        continue
    for r in rows if isinstance(rows, list) else rows.get("results", []):
        test = ("pp%d" % r["n_prompt"]) if r["n_prompt"] else ("tg%d" % r["n_gen"])
        k = (name, test, mode)
        best[k] = max(best.get(k, 0.0), r["avg_ts"])
print("| model | test | full t/s | bounds t/s | off t/s | bounds / full | off / full |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for name, test in sorted({(n, t) for n, t, _ in best}):
    f, b, o = (best.get((name, test, m)) for m in ("full", "bounds", "off"))
    ratio = lambda x: "%.2f" % (x / f) if x and f else "-"
    fmt = lambda x: "%.1f" % x if x else "-"
    print("| %s | %s | %s | %s | %s | %s | %s |" % (name, test, fmt(f), fmt(b), fmt(o), ratio(b), ratio(o)))
PY
