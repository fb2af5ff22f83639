#!/usr/bin/env bash
# The one release build line, shared by docker/Dockerfile's build stage and `make check`:
#
#   scripts/build-release.sh FEATURES OUT_DIR
#
# builds mcp-memory with exactly FEATURES (no default features; "" for none) from the
# locked dependency set, and copies the binary to OUT_DIR/mcp-memory. CARGO_TARGET_DIR is
# honoured (default: target/ in the repository). The two images:
#   s3,bedrock,kb      the AWS image
#   postgres,openai    the slim on-prem image (no AWS SDK, no model runtime)
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 FEATURES OUT_DIR   (e.g. $0 postgres,openai dist/slim)" >&2
  exit 2
fi
features="$1"
out="$2"
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(abs "$out")"
# Relative paths are the caller's, not the repository's.
if [[ -n "${CARGO_TARGET_DIR:-}" ]]; then
  CARGO_TARGET_DIR="$(abs "$CARGO_TARGET_DIR")"
  export CARGO_TARGET_DIR
fi
target="${CARGO_TARGET_DIR:-$repo/target}"

cd "$repo"
cargo build --release --locked --no-default-features --features "$features"
mkdir -p "$out"
cp "$target/release/mcp-memory" "$out/mcp-memory"
echo "built $out/mcp-memory (features: ${features:-none})"
