#!/usr/bin/env bash
# Interop tests: real MCP clients (the Python and TypeScript SDKs and the Inspector's CLI,
# over HTTP and over stdio) and the official conformance suite against the built
# mcp-memory binary (docs/architecture.md#testing; docs/protocol.md#interop-and-conformance).
#
#   bash tests/interop/run.sh path/to/mcp-memory
#
# Installs what it needs on first use (cached: .venv-interop/ and .tools/ in the repo),
# starts a fake OpenAI-compatible embedder and the server on free loopback ports with a
# throw-away SQLite database, runs every check group even after a failure, and ends with
# `interop: N passed, M failed` (exit 1 if M > 0). INTEROP_KEEP=1 keeps the temp dir.
set -euo pipefail

BIN="${1:?usage: run.sh path/to/mcp-memory}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="$REPO/.venv-interop"
MCP_VERSION="2.3.0"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
[[ -x "$BIN" ]] || { echo "not an executable: $BIN" >&2; exit 1; }

# --- tools (idempotent) ----------------------------------------------------------------
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION')" 2>/dev/null; then
  echo "installing mcp==$MCP_VERSION into $VENV"
  # Debian's own python3 ships venv's ensurepip separately (python3-venv).
  python3 -m venv "$VENV" 2>/dev/null || {
    rm -rf "$VENV"
    apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null
    python3 -m venv "$VENV"
  }
  "$VENV/bin/pip" install -q --disable-pip-version-check "mcp==$MCP_VERSION"
fi
bash "$HERE/conformance.sh" --install
bash "$HERE/node_clients.sh" --install

# --- services --------------------------------------------------------------------------
TMP="$(mktemp -d -t mcp-interop.XXXXXX)"
EMBED_PID=""
SERVER_PID=""

stop() { # stop PID: TERM, give it the server's 10 s drain deadline plus slack, then KILL
  local pid="$1" i
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop "${GATEWAY_PID:-}"
  stop "${OAUTH_SERVER_PID:-}"
  stop "${PROVIDER_PID:-}"
  stop "$SERVER_PID"
  stop "$EMBED_PID"
  if [[ "${INTEROP_KEEP:-}" == 1 ]]; then echo "interop: kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
# Make INT/TERM end the script through the EXIT trap too, so nothing is left running.
trap 'exit 130' INT
trap 'exit 143' TERM

show_logs() {
  local f
  for f in "$TMP/server.out" "$TMP/server.err" "$TMP/embed.err" "$TMP/oauth-server.err" "$TMP/provider.err"; do
    echo "---- $f (last 80 lines) ----"
    tail -n 80 "$f" 2>/dev/null || true
  done
  echo "----"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Fake embedder of docs/embeddings.md#test-embedder; it prints its port once it is listening.
python3 "$HERE/fake_embeddings.py" --port 0 >"$TMP/embed.out" 2>"$TMP/embed.err" &
EMBED_PID=$!
for _ in $(seq 1 100); do [[ -s "$TMP/embed.out" ]] && break; sleep 0.1; done
EMBED_PORT="$(head -n 1 "$TMP/embed.out")"
[[ "$EMBED_PORT" =~ ^[0-9]+$ ]] || { echo "fake embedder did not start" >&2; show_logs; exit 1; }

PORT="$(free_port)"
URL="http://127.0.0.1:$PORT/mcp"
# MCP_API_KEY / KNOWLEDGE_BASE_ID from the caller's environment would change what the
# clients see (401s, a sixth tool), so they are removed. The Origin allowlist holds the
# server's own loopback origins: the DNS-rebinding scenario needs them accepted (docs/protocol.md#http-edge).
# HOST keeps the test server on loopback (the server's default too).
# What every server of the run is configured with, over HTTP and over stdio.
SERVER_ENV=(
  DATABASE_URL="sqlite:$TMP/memory.db"
  EMBEDDING_PROVIDER=openai
  EMBEDDING_BASE_URL="http://127.0.0.1:$EMBED_PORT/v1"
  EMBEDDING_API_KEY=test
  EMBEDDING_MODEL=fake-64
  EMBEDDING_DIM=64
  RECALL_MIN_SIMILARITY=0.3
)
env -u MCP_API_KEY -u KNOWLEDGE_BASE_ID \
  HOST=127.0.0.1 \
  PORT="$PORT" \
  "${SERVER_ENV[@]}" \
  MCP_ALLOWED_ORIGINS="http://127.0.0.1:$PORT,http://localhost:$PORT" \
  "$BIN" >"$TMP/server.out" 2>"$TMP/server.err" &
SERVER_PID=$!

# --- check groups ----------------------------------------------------------------------
passed=0
failed=0
check() { # check NAME COMMAND...: one group; failures are counted, not fatal
  local name="$1"
  shift
  echo "== $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "!! $name FAILED"
  fi
}

http_status() { # GET URL, print the HTTP status or "down" (python3: curl may be absent)
  python3 - "$1" <<'PY'
import sys, urllib.error, urllib.request
# No proxy handler: loopback traffic must never go through an inherited HTTP(S)_PROXY.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    print(opener.open(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError:
    print("down")
PY
}

server_started() {
  local i code
  for i in $(seq 1 60); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "server exited during startup"
      return 1
    fi
    code="$(http_status "http://127.0.0.1:$PORT/health")"
    [[ "$code" == 200 ]] && break
    sleep 0.5
  done
  [[ "$code" == 200 ]] || { echo "GET /health did not answer 200 within 30 s (last: $code)"; return 1; }
  grep -q "listening on 127.0.0.1:$PORT (POST /mcp)" "$TMP/server.out" ||
    { echo "no 'listening on 127.0.0.1:$PORT (POST /mcp)' line on stdout"; return 1; }
  echo "server up on :$PORT"
}

check "server start" server_started
if ((failed > 0)); then
  show_logs
  echo "interop: $passed passed, $failed failed"
  exit 1
fi

# Each mode uses its own tenant, so both run against the same database. `timeout`
# bounds a hung server; a healthy run takes a few seconds.
for mode in legacy auto; do
  check "python mcp client, $mode" timeout 300 "$VENV/bin/python" "$HERE/mcp_clients.py" "$URL" "$mode"
done
# The same clients over stdio: each starts `mcp-memory stdio` itself, on the same database.
for mode in legacy auto; do
  check "python mcp client over stdio, $mode" env "${SERVER_ENV[@]}" \
    timeout 300 "$VENV/bin/python" "$HERE/mcp_clients.py" "stdio:$BIN" "$mode"
done
# The TypeScript SDK and the Inspector's CLI, each over HTTP and over stdio.
for client in ts inspector; do
  check "$client over http" bash "$HERE/node_clients.sh" "$client" http "$URL"
  check "$client over stdio" env "${SERVER_ENV[@]}" bash "$HERE/node_clients.sh" "$client" stdio "$BIN"
done
# The same clients with access tokens of a real authorization server (oidc-provider, as in
# tests/auth.rs), against a second server that accepts only those: its own database, since
# the clients' tenants and facts are the same.
bash "$REPO/tests/auth/provider.sh" --install
bash "$REPO/tests/auth/provider.sh" run --port 0 --keys "$TMP/issuer-keys.json" \
  >"$TMP/provider.out" 2>"$TMP/provider.err" &
PROVIDER_PID=$!
OAUTH_PORT="$(free_port)"
OAUTH_URL="http://127.0.0.1:$OAUTH_PORT/mcp"
oauth_server_started() {
  local i issuer
  for i in $(seq 1 240); do [[ -s "$TMP/provider.out" ]] && break; sleep 0.25; done
  issuer="http://127.0.0.1:$(awk '{print $2; exit}' "$TMP/provider.out")"
  [[ "$issuer" =~ :[0-9]+$ ]] || { echo "the authorization server did not start"; cat "$TMP/provider.err"; return 1; }
  ISSUER="$issuer"
  env -u MCP_API_KEY -u KNOWLEDGE_BASE_ID HOST=127.0.0.1 PORT="$OAUTH_PORT" "${SERVER_ENV[@]}" \
    DATABASE_URL="sqlite:$TMP/oauth.db" OAUTH_ISSUER="$ISSUER" OAUTH_RESOURCE="$OAUTH_URL" \
    "$BIN" >"$TMP/oauth-server.out" 2>"$TMP/oauth-server.err" &
  OAUTH_SERVER_PID=$!
  for i in $(seq 1 120); do
    [[ "$(http_status "http://127.0.0.1:$OAUTH_PORT/health")" == 200 ]] && break
    sleep 0.5
  done
  [[ "$(http_status "$OAUTH_URL")" == 401 ]] || { echo "/mcp without a token is not 401"; return 1; }
  TOKEN="$(python3 - "$ISSUER" "$OAUTH_URL" <<'PY'
import base64, json, sys, urllib.parse, urllib.request
issuer, resource = sys.argv[1:]
form = urllib.parse.urlencode({"grant_type": "client_credentials", "resource": resource,
    "scope": "memory:read memory:write memory:any-tenant"}).encode()
request = urllib.request.Request(f"{issuer}/token", data=form, headers={
    "Authorization": "Basic " + base64.b64encode(b"gateway:gateway-secret").decode()})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
print(json.load(opener.open(request, timeout=10))["access_token"])
PY
)" || { echo "no token from the authorization server"; return 1; }
  echo "server with OAuth up on :$OAUTH_PORT, issuer $ISSUER"
}
check "server with OAuth start" oauth_server_started
if [[ -n "${TOKEN:-}" ]]; then
  for mode in legacy auto; do
    check "python mcp client with an access token, $mode" env MCP_TOKEN="$TOKEN" \
      timeout 300 "$VENV/bin/python" "$HERE/mcp_clients.py" "$OAUTH_URL" "$mode"
  done
  check "ts with an access token" env MCP_TOKEN="$TOKEN" bash "$HERE/node_clients.sh" ts http "$OAUTH_URL"
  # The SDK's own flow, as the client the provider binds to one tenant (tests/auth/provider.mjs).
  check "ts finding the authorization server itself" env MCP_OAUTH_ISSUER="$ISSUER" \
    INTEROP_TENANT=interop-ts-oauth bash "$HERE/node_clients.sh" ts http "$OAUTH_URL"
fi

for run in $(bash "$HERE/conformance.sh" --list); do
  check "conformance $run" bash "$HERE/conformance.sh" "$URL" "$TMP/conformance" "$run"
done
# Resources and prompts through a gateway stamping the tenant, with a memory to list.
python3 "$HERE/stamp_tenant.py" "http://127.0.0.1:$PORT" conformance >"$TMP/gateway.out" 2>"$TMP/gateway.err" &
GATEWAY_PID=$!
for _ in $(seq 1 100); do [[ -s "$TMP/gateway.out" ]] && break; sleep 0.1; done
GATEWAY_URL="http://127.0.0.1:$(head -n 1 "$TMP/gateway.out")/mcp"
python3 - "$URL" <<'PY'
import json, sys, urllib.request
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "remember",
    "arguments": {"content": "the conformance tenant keeps one memory to list and read"}}}).encode()
request = urllib.request.Request(sys.argv[1], data=body, headers={
    "Content-Type": "application/json", "X-Tenant-Id": "conformance"})
urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30).read()
PY
for run in $(bash "$HERE/conformance.sh" --list-stamped); do
  check "conformance $run (tenant stamped)" bash "$HERE/conformance.sh" "$GATEWAY_URL" "$TMP/conformance" "$run"
done

if ((failed > 0)); then
  kill -0 "$SERVER_PID" 2>/dev/null || echo "note: the server process is no longer running"
  show_logs
fi
echo "interop: $passed passed, $failed failed"
((failed == 0))
