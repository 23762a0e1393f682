# Sourced by the bench/*.sh scripts that run on a GPU host (from the repository root): the
# Vulkan loader unpacked from .gl/*.deb when the host has none (/work/shared/GPU.md), no
# runtime-dir warning, and `start_summary DIR`: DIR/summary.txt emptied, `log` printing a line
# and appending it there.
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
