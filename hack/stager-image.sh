#!/usr/bin/env bash
# Builds the stager image (S3 staging's init container: FROM scratch, the static binary at
# /kubectl-tao) as an OCI archive with the Go standard library, no docker needed.
# `make stager-image` runs it.
#
# Environment (set by the Makefile): GO, LDFLAGS, VERSION, SOURCE_DATE_EPOCH, RELEASE_TOOL,
# STAGER_IMAGE, STAGER_PLATFORMS, STAGER_ARCHIVE.
set -euo pipefail

: "${GO:=go}" "${LDFLAGS:?}" "${VERSION:?}" "${SOURCE_DATE_EPOCH:?}" "${RELEASE_TOOL:=bin/release}"
: "${STAGER_IMAGE:?}" "${STAGER_PLATFORMS:=linux/amd64 linux/arm64}" "${STAGER_ARCHIVE:=bin/kubectl-tao-stager.oci.tar}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bins=()
for p in $STAGER_PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  echo "stager-image: $os/$arch"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -trimpath -ldflags "$LDFLAGS" -o "$tmp/${os}_$arch" ./cmd/kubectl-tao
  bins+=("$p=$tmp/${os}_$arch")
done
"$RELEASE_TOOL" oci-image -out "$STAGER_ARCHIVE" -ref "$STAGER_IMAGE" -version "$VERSION" \
  -mtime "$SOURCE_DATE_EPOCH" "${bins[@]}"
echo "stager-image: $STAGER_ARCHIVE ($STAGER_IMAGE, $STAGER_PLATFORMS); push it with"
echo "  skopeo copy --all oci-archive:$STAGER_ARCHIVE docker://$STAGER_IMAGE"
