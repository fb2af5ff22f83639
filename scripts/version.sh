#!/usr/bin/env bash
# Prints the package version from Cargo.toml's [package] section, the version's one source.
#
#   scripts/version.sh    # e.g. 0.1.0
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(awk '
  /^\[/ { in_pkg = ($0 == "[package]") }
  in_pkg && /^version[ \t]*=/ { gsub(/^version[ \t]*=[ \t]*"|".*$/, ""); print; exit }
' "$repo/Cargo.toml")"
if [[ -z "$version" ]]; then
  echo "no version line in the [package] section of $repo/Cargo.toml" >&2
  exit 1
fi
echo "$version"
