#!/usr/bin/env bash
# The desktop bundle and the MCP Registry listing, end to end (docs/guide.md#listed-in-the-mcp-registry): scripts/packaging.py builds the .mcpb from the release binary and e5, bundle.py
# checks its manifest against the MCPB schema, installs and runs it as a desktop client would,
# then renders server.json and validates it against the registry's published schema.
#
#   tests/package/bundle.sh path/to/release/mcp-memory E5_DIR
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
e5="$(cd "$2" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: jsonschema==4.26.0
python3 "$repo/scripts/packaging.py" bundle "$bin" "$e5" "$work/mcp-memory.mcpb" --platform linux
"$work/venv/bin/python" "$repo/tests/package/bundle.py" "$repo" "$work/mcp-memory.mcpb" "$work"
