#!/usr/bin/env bash
# Cross-compiles the release archives (the binary, LICENSE and the kubectl completion helper)
# and sha256sums.txt into DIST_DIR. Every archive entry carries SOURCE_DATE_EPOCH, so two builds
# of one commit are byte-identical (`make dist-check`). `make dist` runs it.
#
# Environment (set by the Makefile): GO, LDFLAGS, DIST_DIR, DIST_PLATFORMS, SOURCE_DATE_EPOCH,
# RELEASE_TOOL.
set -euo pipefail

: "${GO:=go}" "${LDFLAGS:?}" "${DIST_DIR:=dist}" "${SOURCE_DATE_EPOCH:?}" "${RELEASE_TOOL:=bin/release}"
: "${DIST_PLATFORMS:=linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64}"

rm -rf "$DIST_DIR"
mkdir -p "$DIST_DIR/.build"
for p in $DIST_PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  exe= script=pkg/plugin/cmd/completion/kubectl_complete-tao sname=kubectl_complete-tao
  if [ "$os" = windows ]; then
    exe=.exe script=$script.cmd sname=$sname.cmd
  fi
  echo "dist: $os/$arch"
  bin=$DIST_DIR/.build/${os}_$arch/kubectl-tao$exe
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -trimpath -ldflags "$LDFLAGS" -o "$bin" ./cmd/kubectl-tao
  "$RELEASE_TOOL" pack -out "$DIST_DIR/kubectl-tao_${os}_$arch.tar.gz" -mtime "$SOURCE_DATE_EPOCH" \
    "kubectl-tao$exe=$bin:755" LICENSE=LICENSE:644 "$sname=$script:755"
done
rm -rf "$DIST_DIR/.build"
"$RELEASE_TOOL" sums -dir "$DIST_DIR"
cat "$DIST_DIR/sha256sums.txt"
