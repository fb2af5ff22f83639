#!/usr/bin/env bash
# Keeps the shared build cache from growing without end: every clone CI builds is a new
# path, so its test and bench executables are new files beside every earlier run's. Of each
# executable in deps/ (the ones without an extension), the newest two are kept; libraries
# and build scripts are left alone.
set -euo pipefail
target="${CARGO_TARGET_DIR:-$HOME/.cache/mcp-memory/target}"
for deps in "$target"/debug/deps "$target"/release/deps; do
  [ -d "$deps" ] || continue
  find "$deps" -maxdepth 1 -type f -perm -u+x ! -name '*.*' -printf '%T@ %f\n' \
    | sort -rn \
    | awk -v dir="$deps" '{ name = $2; sub(/-[0-9a-f]+$/, "", name); if (++seen[name] > 2) print dir "/" $2 }' \
    | xargs -r rm -f
done
