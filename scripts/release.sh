#!/usr/bin/env bash
# Cuts a release: `make release VERSION=x.y.z`.
#
#   scripts/release.sh 1.2.3
#
# On a clean work tree, sets `version = "1.2.3"` in Cargo.toml's [package] (the one source
# of the version), refreshes Cargo.lock, commits both as `chore: release v1.2.3` and makes
# the annotated tag v1.2.3. Nothing is pushed: `git push --follow-tags` starts the release
# workflow (.github/workflows/release.yml).
set -euo pipefail

if [[ $# -ne 1 || ! "$1" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$ ]]; then
  echo "usage: $0 X.Y.Z   (e.g. make release VERSION=1.2.3)" >&2
  exit 2
fi
version="$1"
tag="v$version"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if [[ -n "$(git status --porcelain)" ]]; then
  echo "the work tree is not clean; commit or stash first:" >&2
  git status --short >&2
  exit 1
fi
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
  echo "tag $tag already exists" >&2
  exit 1
fi

current="$(bash scripts/version.sh)"
if [[ "$current" == "$version" ]]; then
  echo "Cargo.toml is already at $version" >&2
  exit 1
fi
if [[ "$(printf '%s\n%s\n' "$current" "$version" | sort -V | tail -n 1)" != "$version" ]]; then
  echo "$version is not above the current version $current" >&2
  exit 1
fi

# The version line of [package], and nothing else (dependencies have versions too).
awk -v v="$version" '
  /^\[/ { in_pkg = ($0 == "[package]") }
  in_pkg && !done && /^version[ \t]*=/ { print "version = \"" v "\""; done = 1; next }
  { print }
' Cargo.toml >Cargo.toml.tmp
mv Cargo.toml.tmp Cargo.toml

# Only the package's own entry in the lock file changes; offline first (no index update).
cargo update --workspace --offline || cargo update --workspace
if ! grep -A1 -x 'name = "mcp-memory"' Cargo.lock | grep -qx "version = \"$version\""; then
  echo "Cargo.lock does not carry mcp-memory $version (undo with: git checkout -- Cargo.toml Cargo.lock)" >&2
  exit 1
fi
changed="$(git status --porcelain | awk '{print $2}' | sort | tr '\n' ' ')"
if [[ "$changed" != "Cargo.lock Cargo.toml " ]]; then
  echo "expected only Cargo.toml and Cargo.lock to change, got: $changed" >&2
  echo "(undo with: git checkout -- Cargo.toml Cargo.lock)" >&2
  exit 1
fi

git commit -q -m "chore: release $tag" -- Cargo.toml Cargo.lock
git tag -a "$tag" -m "$tag"
echo "released $tag ($current -> $version). Publish it with: git push --follow-tags"
