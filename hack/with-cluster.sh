#!/usr/bin/env bash
# Brings a local cluster up in STATE_DIR, runs a command against it (KUBECONFIG exported), and
# brings the cluster down whatever happened, exiting with the command's code (or up's, if the
# cluster never came up). `make e2e`, `make bench` and `make bench-capacity` run through it.
#
#   hack/with-cluster.sh STATE_DIR [localcluster up flags...] -- COMMAND [ARGS...]
#
# Environment: LOCALCLUSTER, the launcher binary (default bin/localcluster). The Kubernetes
# release is an up flag (--kubernetes-version, as the Makefile passes it) or KUBERNETES_VERSION.
set -euo pipefail

localcluster=${LOCALCLUSTER:-bin/localcluster}
if [ $# -lt 1 ]; then
  echo "usage: $0 STATE_DIR [up flags...] -- COMMAND [ARGS...]" >&2
  exit 2
fi
state_dir=$1
shift
up_flags=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  up_flags+=("$1")
  shift
done
if [ $# -lt 2 ]; then
  echo "usage: $0 STATE_DIR [up flags...] -- COMMAND [ARGS...]" >&2
  exit 2
fi
shift # the --

rc=0
"$localcluster" up --state-dir "$state_dir" "${up_flags[@]}" || rc=$?
if [ "$rc" -eq 0 ]; then
  KUBECONFIG="$state_dir/kubeconfig" "$@" || rc=$?
fi
# A cluster that failed to come up half-way is torn down too; its own error already said why.
"$localcluster" down --state-dir "$state_dir" || true
exit "$rc"
