#!/usr/bin/env bash
# Renders a krew manifest for VERSION from .krew.yaml and the archives in DIST_DIR into
# DIST_DIR/krew/tao.yaml (the committed krew/tao.yaml is left alone), validates it, installs it
# offline with krew into a temporary KREW_ROOT, runs `kubectl tao version` and kubectl's
# completion through kubectl, and uninstalls it. `make krew-check` runs it after `make dist`.
#
# Environment (set by the Makefile): VERSION, DIST_DIR, RELEASE_TOOL, KREW,
# VALIDATE_KREW_MANIFEST, KUBECTL.
set -euo pipefail

: "${VERSION:?}" "${DIST_DIR:=dist}" "${RELEASE_TOOL:=bin/release}" "${KREW:?}" "${VALIDATE_KREW_MANIFEST:?}" "${KUBECTL:=kubectl}"

archive=$DIST_DIR/kubectl-tao_linux_amd64.tar.gz
if [ ! -f "$archive" ]; then
  echo "no archives in $DIST_DIR/: run 'make dist' first" >&2
  exit 1
fi
manifest=$DIST_DIR/krew/tao.yaml
"$RELEASE_TOOL" krew-manifest -template .krew.yaml -tag "$VERSION" -dist "$DIST_DIR" -out "$manifest"
"$VALIDATE_KREW_MANIFEST" -manifest "$manifest" -skip-install

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
git init -q "$root/index/default"
mkdir -p "$root/tools"
ln -s "$KREW" "$root/tools/kubectl-krew"
export KREW_ROOT="$root" KREW_NO_UPGRADE_CHECK=1 PATH="$root/bin:$root/tools:$PATH"
$KUBECTL krew install --manifest="$manifest" --archive="$archive"
out=$($KUBECTL tao version)
echo "$out"
case "$out" in
  "kubectl-tao $VERSION "*) ;;
  *) echo "krew-check: want version $VERSION" >&2; exit 1 ;;
esac
eval "$($KUBECTL tao completion kubectl)"
comp=$($KUBECTL __complete tao vers 2>/dev/null)
case "$comp" in
  version*) ;;
  *) echo "krew-check: kubectl __complete tao vers answered: $comp" >&2; exit 1 ;;
esac
$KUBECTL krew list | grep -Eqx '(detached/)?tao'
$KUBECTL krew uninstall tao
echo "krew-check: installed, ran and completed kubectl tao $VERSION through $($KUBECTL version --client 2>/dev/null | head -1)"
