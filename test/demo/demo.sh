#!/usr/bin/env bash
# The demo `make demo` runs: a multi-node GPU job through kubectl-tao on the local cluster.
# Each step is printed as the user would type it. Expects kubectl-tao on PATH and KUBECONFIG set.
set -euo pipefail

bold=$'\033[1m' dim=$'\033[2m' reset=$'\033[0m'
[ -t 1 ] || { bold='' dim='' reset=''; }

step() { printf '\n%s# %s%s\n' "$dim" "$1" "$reset"; }
# show prints a command the way one would type it: arguments that need it in single quotes.
show() {
  local out='' a
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
  done
  printf '%s$ %s%s\n' "$bold" "${out% }" "$reset"
}
run() {
  show "$@"
  "$@"
}
# run_expect_fail shows a command the plugin must refuse, and its exit code.
run_expect_fail() {
  show "$@"
  local rc=0
  "$@" || rc=$?
  [ "$rc" -ne 0 ] || { echo "demo: expected a refusal" >&2; exit 1; }
  printf '%s(exit code %d)%s\n' "$dim" "$rc" "$reset"
}

job=demo-ddp
for j in "$job" demo-oom demo-forever; do
  kubectl delete job "$j" --ignore-not-found --wait=true >/dev/null 2>&1 || true
done

step "The plugin, found by kubectl on PATH"
run kubectl tao version

step "The cluster: simulated GPU nodes, 8 x nvidia.com/gpu each"
run kubectl get nodes -o custom-columns='NAME:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product'

step "What a 2-node x 8-GPU job is made of, without creating it (just the Job's command and env here)"
run kubectl tao submit "$job" --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --gpus 8 --nodes 2 \
  --dry-run=client -o jsonpath='{.items[0].spec.template.spec.containers[0].env}{"\n"}' \
  -- 'torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE train.py'

step "Submit it for real, with a TAO spec file from this machine (the local cluster simulates 4 s of training per rank)"
specdir=$(mktemp -d)
trap 'rm -rf "$specdir"' EXIT
printf 'train:\n  num_epochs: 10\n  checkpoint_interval: 1\n' >"$specdir/dino.yaml"
run kubectl tao submit "$job" --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --gpus 8 --nodes 2 \
  --file "$specdir/dino.yaml:/specs/train.yaml" \
  --annotation sim.kubectl-tao.dev/run-duration=4s --annotation sim.kubectl-tao.dev/log-interval=400ms \
  -- 'dino train -e /specs/train.yaml results_dir=/results'

step "The spec file travels in a ConfigMap owned by the Job, mounted at exactly /specs/train.yaml"
run kubectl get configmap "$job-files" -o jsonpath='{.data}{"\n"}'

step "One pod per rank, each on its own node, reachable as $job-0.$job and $job-1.$job"
# (not shown: give the job controller and the scheduler a moment to place both ranks)
for _ in $(seq 50); do
  [ "$(kubectl get pods -l job-name="$job" --field-selector=status.phase=Running -o name | wc -l)" -ge 2 ] && break
  sleep 0.2
done
run kubectl get pods -l job-name="$job" -o wide
run kubectl tao status "$job"

step "Follow every rank's log; it ends by itself when the job ends, with the job's exit code"
run kubectl tao logs -f "$job"
run kubectl tao list

step "A rank that runs out of memory: submit --wait exits non-zero, diagnose says why"
run_expect_fail kubectl tao submit demo-oom --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --gpus 8 --nodes 2 \
  --annotation sim.kubectl-tao.dev/fate=oom --wait -- 'dino train -e /specs/train.yaml'
run kubectl tao diagnose demo-oom

step "A job no node can hold is refused before anything is created"
run_expect_fail kubectl tao submit too-big --image img --gpus 16 -- python train.py

step "Cancel: the command returns once every rank has stopped"
run kubectl tao submit demo-forever --image img --gpus 8 --annotation sim.kubectl-tao.dev/fate=run-forever -- sleep infinity
run kubectl tao wait demo-forever --timeout 1s || true
run kubectl tao cancel demo-forever

cat <<EOT

${bold}The local cluster is still up. To use it by hand:${reset}
  export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$(command -v kubectl-tao)"):\$PATH
  kubectl tao submit --image busybox --gpus 8 --nodes 2 -- 'echo rank \$NODE_RANK of \$WORLD_SIZE'
Stop it with: make cluster-down
EOT
