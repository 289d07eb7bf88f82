#!/usr/bin/env bash
# Fails when README.md outgrows README_MAX_BYTES: the README is for users (what it is, install,
# a quick start); everything else belongs in docs/. `make readme-check`, part of `make ci-checks`.
set -euo pipefail

: "${README_MAX_BYTES:=16384}"
size=$(wc -c < README.md)
if [ "$size" -gt "$README_MAX_BYTES" ]; then
  echo "README.md is $size bytes, more than $README_MAX_BYTES: move developer and reference content to docs/" >&2
  exit 1
fi
echo "readme-check: README.md is $size bytes (at most $README_MAX_BYTES)"
