#!/usr/bin/env bash
# The main job on a fresh machine: make sure a WebGPU driver exists (lavapipe, the software Vulkan
# driver, when the machine has no GPU driver), build wgllm, and answer a question with the default
# model (SmolLM2-135M-Instruct Q4_1, downloaded and sha256-verified on first use).
#
#   bash scripts/main-job.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."
question="${1:-What is the capital of France?}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "main-job: no Vulkan loader found; installing lavapipe (mesa-vulkan-drivers libvulkan1)" >&2
    apt-get update -qq && apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1
  else
    echo "main-job: no Vulkan loader found; install your GPU's Vulkan driver (or mesa-vulkan-drivers)" >&2
  fi
fi

# PROFILE=dev reuses a test build (.ci/run); users get the release build.
profile="${PROFILE:-release}"
cargo build --profile "$profile" -q -p wgllm
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
exec "./target/$dir/wgllm" run --chat -p "$question" -n 128 --temp 0
