#!/usr/bin/env bash
# Builds the release archives twice (DIST_DIR, then a temporary directory) and fails unless both
# builds are byte-identical. `make dist-check` runs it; the environment is hack/dist.sh's.
set -euo pipefail

: "${DIST_DIR:=dist}"
here=$(dirname "$0")
"$here/dist.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DIST_DIR="$tmp/dist" "$here/dist.sh" >/dev/null
if ! cmp -s "$DIST_DIR/sha256sums.txt" "$tmp/dist/sha256sums.txt"; then
  echo "dist is not reproducible:"
  diff "$DIST_DIR/sha256sums.txt" "$tmp/dist/sha256sums.txt" || true
  exit 1
fi
echo "dist: reproducible (two builds, identical sha256sums.txt)"
