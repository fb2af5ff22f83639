#!/usr/bin/env bash
# Runs a command with a throw-away PostgreSQL started for it (TEST_DATABASE_URL), and
# stops the server afterwards, whatever the command's outcome.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TEST_DATABASE_URL="$(bash "$here/pg.sh" start)"
export TEST_DATABASE_URL
trap 'bash "$here/pg.sh" stop >/dev/null 2>&1' EXIT
"$@"
