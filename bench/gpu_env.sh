# Sourced by the bench/*.sh scripts that run on a GPU host (from the repository root): the
# Vulkan loader unpacked from .gl/*.deb when the host has none (/work/shared/GPU.md), no
# runtime-dir warning, `start_summary DIR`: DIR/summary.txt emptied, `log` printing a line
# and appending it there, and `commit BINARY`: the commit in BINARY.commit next to it, or "?".
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
export XDG_RUNTIME_DIR=/tmp

start_summary() {
    mkdir -p "$1"
    S="$1/summary.txt"
    : >"$S"
    log() { echo "$*" | tee -a "$S"; }
}

commit() { cat "$1.commit" 2>/dev/null || echo "?"; }
