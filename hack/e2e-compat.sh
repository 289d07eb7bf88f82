#!/usr/bin/env bash
# The compatibility matrix (`make e2e-compat`, docs/compat.md): for each Kubernetes minor in
# COMPAT_MINORS, one after another, `make e2e` runs TestCompat on a local cluster of the newest
# patch of that minor the module proxy serves; a minor that fails does not stop the next. Two
# minors also get the real node, so that the rows only a container that really runs can show
# (results, delete-artifacts) are tested on a real kubelet: the oldest minor the real node runs
# (its containerd's floor) and the newest. The others run on simulated nodes only. At the end
# hack/compattable prints the table feature x release (pass, degraded, fail, n/a, with each
# warning or reason as a note) and writes it to COMPAT_TABLE.
#
# Environment: COMPAT_MINORS (default "1.28 1.29 1.31 1.32 1.33 1.35 1.37"),
# COMPAT_REAL_NODE_MINORS (default: the oldest minor of COMPAT_MINORS the real node runs, and the
# newest; "" for none), COMPAT_DIR (each release's report and make log; default bin/compat),
# COMPAT_TABLE (default bin/compat-table.md), GO, MAKE and LOCALCLUSTER (the Makefile passes
# them).
set -euo pipefail

minors=$(tr ' ' '\n' <<<"${COMPAT_MINORS:-1.28 1.29 1.31 1.32 1.33 1.35 1.37}" | grep . | sort -V -u)
dir=${COMPAT_DIR:-bin/compat}
table=${COMPAT_TABLE:-bin/compat-table.md}
go=${GO:-go}
make=${MAKE:-make}
localcluster=${LOCALCLUSTER:-bin/localcluster}
mkdir -p "$dir" "$(dirname "$table")"
dir=$(cd "$dir" && pwd)

# The cluster of the minor being run. make e2e brings it down itself; this covers an interrupt
# or a kill between up and down, since a cluster left running holds ports, memory and CPU.
cluster=""
down() {
  if [ -n "$cluster" ] && [ -e "$cluster" ]; then
    "$localcluster" down --state-dir "$cluster" >/dev/null 2>&1 || true
  fi
  cluster=""
}
trap down EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The proxy's version list omits some old minors (v1.28) that it serves when asked by version:
# those take the newest release whose wrapper module is committed.
versions=$("$go" list -m -versions k8s.io/kubernetes)
resolve() {
  local minor=$1 v
  v=$(tr ' ' '\n' <<<"$versions" | grep -E "^v${minor//./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)
  if [ -z "$v" ]; then
    v=$(find test/localcluster/build -maxdepth 1 -name "kubernetes-v${minor}.*" -printf '%f\n' |
      sed 's/^kubernetes-//' | grep -E "^v${minor//./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)
  fi
  echo "$v"
}

# The real node's oldest minor, from the launcher's own constant (one home for it).
real_floor=$(sed -n 's/^const RealNodeMinKubernetesMinor = \([0-9][0-9]*\)$/\1/p' test/localcluster/kubeversion.go)
if [ -z "$real_floor" ]; then
  echo "e2e-compat: RealNodeMinKubernetesMinor not found in test/localcluster/kubeversion.go" >&2
  exit 1
fi
if [ -n "${COMPAT_REAL_NODE_MINORS+set}" ]; then
  real_minors=$COMPAT_REAL_NODE_MINORS
else
  real_minors="$(awk -F. -v floor="$real_floor" '$2 >= floor { print; exit }' <<<"$minors") $(tail -n 1 <<<"$minors")"
fi
real_node() { tr ' ' '\n' <<<"$real_minors" | grep -qxF "$1"; }
for m in $real_minors; do
  if ! grep -qxF "$m" <<<"$minors"; then
    echo "e2e-compat: COMPAT_REAL_NODE_MINORS names $m, which is not in COMPAT_MINORS ($(echo $minors))" >&2
    exit 2
  fi
done

reports=()
failed=()
for minor in $minors; do
  release=$(resolve "$minor")
  if [ -z "$release" ]; then
    echo "e2e-compat: $minor: the module proxy lists no release of it and none is committed; skipped" >&2
    failed+=("$minor")
    continue
  fi
  report=$dir/$release.json
  log=$dir/$release.log
  rm -f "$report"
  reports+=("$release=$report")
  cluster=$PWD/.cluster-compat-$release
  # auto: the real node where the host allows it (root); elsewhere its rows say why not.
  real=0
  if real_node "$minor"; then
    real=auto
  fi
  echo "e2e-compat: $release$([ "$real" = auto ] && echo ' with the real node') (log: $log)" >&2
  start=$SECONDS
  # $$ is make's "$". COMPAT_KUEUE: TestCompat starts Kueue's real manager itself for the
  # --queue row.
  if COMPAT_KUEUE=1 COMPAT_REPORT=$report "$make" --no-print-directory e2e KUBERNETES_VERSION="$release" REAL_NODE="$real" \
    CLUSTER_DIR="$cluster" E2E_FLAGS='-run ^TestCompat$$ -v' >"$log" 2>&1; then
    echo "e2e-compat: $release passed in $((SECONDS - start)) s" >&2
  else
    echo "e2e-compat: $release FAILED in $((SECONDS - start)) s; the last lines of its log:" >&2
    tail -n 15 "$log" >&2
    failed+=("$release")
  fi
  down
done

"$go" run ./hack/compattable -o "$table" "${reports[@]}"
echo >&2
echo "e2e-compat: table written to $table" >&2
if [ ${#failed[@]} -gt 0 ]; then
  echo "e2e-compat: failed: ${failed[*]}" >&2
  exit 1
fi
