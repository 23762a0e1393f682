#!/usr/bin/env bash
# `cargo check` of the whole workspace (tests included) for macOS on Apple silicon and for
# Windows (MSVC): the Metal and DX12 builds type-check on any Linux machine.
#   bash scripts/cross/check.sh [TARGET...]
# A check links nothing, but build scripts still run: ring's compiles its C and assembly with
# the target's C compiler and SDK, which Linux lacks. The stand-in compiler beside this script
# emits an empty object for the target in their place (real Mach-O or COFF, made by clang, so
# the archivers accept it); the Rust code of every crate is checked in full.
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(aarch64-apple-darwin x86_64-pc-windows-msvc)
if ! command -v clang >/dev/null || ! command -v llvm-lib >/dev/null; then
  echo "cross: installing clang llvm"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends clang llvm
fi
cc=$PWD/scripts/cross/empty-object-cc
for t in "${targets[@]}"; do
  rustup target add "$t"
  v=${t//-/_}
  echo "cross: cargo check --target $t"
  env "CC_$v=$cc" "AR_$v=$([[ $t == *msvc ]] && echo llvm-lib || echo llvm-ar)" \
    cargo check --workspace --all-targets --locked --target "$t"
done
