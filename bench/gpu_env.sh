# Sourced by the bench/*.sh scripts that run on a GPU host (from the repository root): the
# Vulkan loader and libglvnd unpacked from .gl/*.deb (/work/shared/GPU.md), no
# runtime-dir warning, `start_summary DIR`: DIR/summary.txt emptied, `log` printing a line
# and appending it there, and at the script's exit the other files the run wrote in DIR packed
# into DIR/files.tgz (a device call returns 8 files of its output folder: browser_paths.sh
# writes ~36, and session 17 lost all but 8), `commit BINARY`: the commit in BINARY.commit next to it, or "?", and
# `synth_models BINARY`: the synthetic SmolLM2-135M Q4_1, llama-3.2-1b Q4_0 and llama-3.1-8b
# Q4_0 written into M=/tmp/wgllm-bench in the background when missing (wait for them),
# `have_model NAME`: true when M/NAME.gguf exists (its path in `file`), else the skip logged,
# and `ab_start NAME OUT_DEFAULT NEW BASE`: the A/B scripts' start (NEW, BASE, OUT, R, M set,
# the summary begun with both commits, `synth_models` run).
# Unpacked whether or not the host has a loader: on 2026-12-01 an H200 host had libvulkan but
# no libglvnd, and NVIDIA's ICD (libGLX_nvidia) then answered no vkCreateInstance until
# libglvnd0 (with libegl1 libgl1 libglx0 libgles2 libopengl0) was unpacked too.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export XDG_RUNTIME_DIR=/tmp

start_summary() {
    mkdir -p "$1"
    S="$1/summary.txt"
    : >"$S"
    rm -f "$1/files.tgz"
    touch "$1/.started"
    log() { echo "$*" | tee -a "$S"; }
    trap 'pack_out "$(dirname "$S")"' EXIT
}

# Packs the files this run wrote directly in DIR (newer than its .started mark), but
# summary.txt, into DIR/files.tgz; no archive when it wrote none.
pack_out() {
    (
        cd "$1" || exit
        local list
        list=$(mktemp)
        find . -maxdepth 1 -type f -newer .started ! -name summary.txt ! -name files.tgz \
            -print0 >"$list"
        [ -s "$list" ] && tar czf files.tgz --null -T "$list" --remove-files
        rm -f .started "$list"
    )
}

commit() { cat "$1.commit" 2>/dev/null || echo "?"; }

ab_start() {
    NEW=${3:?usage: bench/$1 NEW_WGLLM BASE_WGLLM}
    BASE=${4:?usage: bench/$1 NEW_WGLLM BASE_WGLLM}
    OUT=${OUT:-$2}
    R=${R:-3}
    start_summary "$OUT"
    log "# $(date -u +%F) new $NEW ($(commit "$NEW")), base $BASE ($(commit "$BASE"))"
    synth_models "$NEW"
}

M=/tmp/wgllm-bench
MODELS=(smollm2-q4_1 l1b-q4_0 l8b-q4_0)

synth_models() {
    local bin=$1 p
    mkdir -p "$M"
    for p in "smollm2-q4_1 smollm2-135m q4_1" "l1b-q4_0 llama-3.2-1b q4_0" "l8b-q4_0 llama-3.1-8b q4_0"; do
        set -- $p
        [ -s "$M/$1.gguf" ] || timeout 300 "$bin" synth --preset "$2" --dtype "$3" \
            -o "$M/$1.gguf" >"$OUT/synth-$1.txt" 2>&1 &
    done
}

have_model() {
    file=$M/$1.gguf
    [ -s "$file" ] && return 0
    log "$1: no model at $file, skipped"
    return 1
}
