#!/usr/bin/env bash
# Fills, in the background, the caches that CI's later steps would otherwise fill one after the
# other: the local cluster's binaries (control plane, the real node's parts, Kueue's manager) and
# the Go build cache for every release platform (the Makefile's ci-warm target then installs
# krew's tools). `.ci/run` starts it at the lowest CPU priority right after fetching the
# toolchain, so it takes only CPU the steps in front leave idle (module downloads, tests that wait
# on a cluster): on a brand-new 2-core machine the cold builds are most of the run, and the e2e
# suite leaves a core idle for minutes.
#
# It writes only where sharing is safe: the cluster's binary cache (each build holds the cache's
# lock, so a step that needs a binary waits for it instead of building it twice), Go's build and
# module caches, and its own temporary directory. A step that fails here is only reported: the
# step in front that needs it builds it again and fails there if it must.
#
# Environment (set by the Makefile's ci-warm target): hack/dist.sh's, and REAL_NODE (1 to build
# the real node's parts too).
set -uo pipefail

: "${GO:=go}" "${REAL_NODE:=0}"
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
start=$SECONDS

# children_cpu is the user and system CPU seconds of every process this script has waited for.
# It runs `times` in this shell (a command substitution would report its own subshell's).
children_cpu() {
  times >"$tmp/times"
  awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$tmp/times"
}

# Each line gives the step's wall time and its CPU: at the lowest priority, wall time says how
# much CPU the steps in front left idle, the CPU what the step itself costs.
step() {
  local what=$1 t=$SECONDS
  shift
  children_cpu >"$tmp/cpu0"
  if "$@" >"$tmp/out" 2>&1; then
    children_cpu >"$tmp/cpu1"
    echo "ci-warm: $what ($((SECONDS - t))s, CPU $(($(cat "$tmp/cpu1") - $(cat "$tmp/cpu0")))s)"
  else
    failed=1
    echo "ci-warm: $what failed after $((SECONDS - t))s (the step that needs it builds it again):"
    tail -n 20 "$tmp/out"
  fi
}

# Own copies of the launcher and the release tool: the steps in front rebuild bin/ each time.
step "localcluster" "$GO" build -o "$tmp/localcluster" ./test/localcluster/cmd/localcluster
if [ -x "$tmp/localcluster" ]; then
  # kubectl too where the machine has none: make e2e builds it then, right after the cluster.
  kubectl_flag=
  command -v kubectl >/dev/null 2>&1 || kubectl_flag=--kubectl
  step "the cluster's binaries" "$tmp/localcluster" build --real-node="$REAL_NODE" --kueue $kubectl_flag
fi
step "release tool" "$GO" build -o "$tmp/release" ./hack/release/cmd/release
if [ -x "$tmp/release" ]; then
  # The release build itself, into a directory of its own: dist-check then links only.
  step "release archives" env DIST_DIR="$tmp/dist" RELEASE_TOOL="$tmp/release" "$here/dist.sh"
fi
echo "ci-warm: done in $((SECONDS - start))s"
exit "$failed"
