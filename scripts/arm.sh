#!/usr/bin/env bash
# The encoder's tests on AArch64 (crates/encoder/src/arch/aarch64): cross-built for
# aarch64-unknown-linux-gnu and run under qemu-aarch64, whose CPU (`max`) has NEON and the
# dot-product extension, so every kernel's proptest runs the NEON tile, unpacking and SDOT
# products against the portable ones. Installs what it needs: Debian's qemu-user and
# cross gcc (the linker), and the target's standard library by rustup. A native aarch64
# machine runs `cargo test -p mcp-memory-encoder` instead (.github/workflows/ci.yml, `arm`).
set -euo pipefail
TARGET=aarch64-unknown-linux-gnu
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  echo "installing Debian's qemu-user and gcc-aarch64-linux-gnu"
  sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi
if ! rustup target list --installed | grep -qx "$TARGET"; then
  rustup target add "$TARGET"
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu"
cargo test -p mcp-memory-encoder --target "$TARGET"
