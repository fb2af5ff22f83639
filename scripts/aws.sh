#!/usr/bin/env bash
# The local AWS emulator for the tests (docs/architecture.md#aws-emulator): moto 5.2.5 plus the launcher in
# tests/support/aws_emulator.py, which adds QueryVectors, Titan embeddings and a fake
# knowledge base. One loopback port serves S3, S3 Vectors, Bedrock and Bedrock Agent.
#
#   scripts/aws.sh start   # prints the endpoint URL once the emulator listens
#   scripts/aws.sh stop
#
# AWS_EMULATOR=path runs another launcher of the same interface instead (make test runs the
# S3 suites again against ../shared/tools/aws_emulator.py). State lives in .aws-emulator/
# (gitignored); the venv in .venv-aws/.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-aws"
state="$repo/.aws-emulator"
PKG="moto[server]==5.2.5"

start() {
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import moto' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$PKG" >&2
  fi
  stop >/dev/null 2>&1 || true
  mkdir -p "$state"
  : >"$state/log"
  "$venv/bin/python" "${AWS_EMULATOR:-$repo/tests/support/aws_emulator.py}" --host 127.0.0.1 --port 0 \
    >"$state/log" 2>&1 &
  echo $! >"$state/pid"
  for _ in $(seq 1 200); do
    if grep -qs READY "$state/log"; then
      echo "http://127.0.0.1:$(awk '/READY/{print $2; exit}' "$state/log")"
      return 0
    fi
    kill -0 "$(cat "$state/pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "the AWS emulator did not start:" >&2
  cat "$state/log" >&2
  return 1
}

stop() {
  [[ -f "$state/pid" ]] || return 0
  kill "$(cat "$state/pid")" 2>/dev/null || true
  rm -f "$state/pid"
}

"$1"
