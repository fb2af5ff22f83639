#!/usr/bin/env bash
# The PyPI route, end to end (pyproject.toml): maturin builds the wheel from this checkout, pip
# installs it into a clean virtualenv, and the `mcp-memory` it puts on the venv's PATH answers
# --version with Cargo.toml's version and keeps a memory over stdio that a second process
# recalls, on the e5 model `make models` fetched; then `uvx --from WHEEL mcp-memory stdio`, the
# client entry of the README's "uvx" form, recalls it too.
#
#   tests/package/wheel.sh E5_DIR
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
e5="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/build"
"$work/build/bin/pip" install -q --disable-pip-version-check --only-binary=:all: maturin==1.16.0 uv==0.13.8
(cd "$repo" && "$work/build/bin/maturin" build --release --locked --out "$work/dist" >&2)
wheels=("$work"/dist/mcp_memory_rs-*.whl)
[[ ${#wheels[@]} -eq 1 && -f "${wheels[0]}" ]] || { echo "wheel.sh: no wheel in $work/dist" >&2; exit 1; }

"$PYTHON" -m venv "$work/clean"
"$work/clean/bin/pip" install -q --disable-pip-version-check --no-index "${wheels[0]}"
bin="$work/clean/bin/mcp-memory"
version="$(bash "$repo/scripts/version.sh")"
"$bin" --version | grep -q "$version" || { echo "wheel.sh: --version is not $version" >&2; exit 1; }

export MEMORY_TENANT=wheel EMBEDDING_PROVIDER=local EMBEDDING_MODEL="$e5" \
  DATABASE_URL="sqlite:$work/memory.db"
call() { # TOOL ARGUMENTS-JSON: one call through a new stdio process, its text on stdout
  printf '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"%s","arguments":%s}}\n' "$1" "$2" \
    | "$bin" stdio 2>/dev/null
}
stored="$(call remember '{"content":"the staging cluster is called blue-lagoon"}')"
grep -q 'Stored as' <<<"$stored" || { echo "wheel.sh: remember answered $stored" >&2; exit 1; }
found="$(call recall '{"query":"what is the staging cluster called?"}')"
grep -q 'blue-lagoon' <<<"$found" || { echo "wheel.sh: recall answered $found" >&2; exit 1; }

# uvx runs the wheel in an environment of its own, offline, with this machine's Python.
via_uvx="$(printf '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall","arguments":{"query":"what is the staging cluster called?"}}}\n' \
  | UV_CACHE_DIR="$work/uv-cache" UV_TOOL_DIR="$work/uv-tools" UV_PYTHON_DOWNLOADS=never \
    "$work/build/bin/uvx" --offline --from "${wheels[0]}" mcp-memory stdio 2>/dev/null)"
grep -q 'blue-lagoon' <<<"$via_uvx" || { echo "wheel.sh: uvx's recall answered $via_uvx" >&2; exit 1; }
echo "wheel.sh: ${wheels[0]##*/} installs mcp-memory $version, which remembers and recalls, also through uvx"
