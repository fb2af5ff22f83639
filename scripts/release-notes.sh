#!/usr/bin/env bash
# Release notes for a tag: the subjects of the commits since the previous v* tag, newest
# first, as a Markdown list, without merge commits and without the release commit itself
# (`chore: release vX.Y.Z`, made by scripts/release.sh).
#
#   scripts/release-notes.sh v1.2.3 > notes.md
#
# Needs the full history and the tags (actions/checkout with fetch-depth: 0).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 TAG" >&2
  exit 2
fi
tag="$1"
git rev-parse -q --verify "refs/tags/$tag" >/dev/null || { echo "no tag $tag" >&2; exit 1; }

# The nearest v* tag strictly before this one; none for the first release.
if prev="$(git describe --tags --abbrev=0 --match 'v*' "$tag^" 2>/dev/null)"; then
  range="$prev..$tag"
else
  range="$tag"
fi

notes="$(git log --no-merges --format='- %s' "$range" | grep -vxF -- "- chore: release $tag" || true)"
echo "${notes:-- No changes${prev:+ since $prev}.}"
