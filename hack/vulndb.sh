#!/usr/bin/env bash
# Indexes the Go vulnerability database (the golang.org/x/vulndb module, served by the Go module
# proxy) into VULNDB_DIR, so that govulncheck runs offline (`make vulncheck`). Written to a
# temporary directory first: an interrupted run leaves no half-made database behind.
#
# Environment (set by the Makefile): GO, INDEXDB, VULNDB_VERSION, VULNDB_DIR.
set -euo pipefail

: "${GO:=go}" "${INDEXDB:?}" "${VULNDB_VERSION:?}" "${VULNDB_DIR:?}"

src=$($GO mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ ! -d "$src/data/osv" ]; then
  echo "golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2
  exit 1
fi
rm -rf "$VULNDB_DIR.tmp"
"$INDEXDB" -vulns "$src/data/osv" -out "$VULNDB_DIR.tmp"
rm -rf "$VULNDB_DIR"
mv "$VULNDB_DIR.tmp" "$VULNDB_DIR"
