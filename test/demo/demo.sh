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
for j in "$job" demo-oom demo-forever demo-real demo-real-long; do
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

# The real part: real containers on the cluster's real kubelet node, when it runs. `up` writes
# what the e2e tests get about it next to the kubeconfig (test/localcluster/README.md).
real_env="$(dirname "$KUBECONFIG")/realnode.env"
if [ -z "${TAO_REAL_NODE:-}" ] && [ -f "$real_env" ]; then
  # shellcheck disable=SC1090
  . "$real_env"
fi
if [ -z "${TAO_REAL_NODE:-}" ]; then
  # The reason may be REAL_NODE=0, a host that cannot run it, or another holder of the node.
  step "Real containers: skipped, this cluster has no real node: ${TAO_REAL_NODE_SKIP:-not started}. make demo REAL_NODE=1 asks for one (root on Linux)"
else
  real=(--image "$TAO_TEST_IMAGE" --gpus 1 --nodes 2 --shm-size 64Mi
    --node-selector kubectl-tao.dev/real-node=true --toleration kubectl-tao.dev/real-node=true:NoSchedule)
  step "Real containers on the real kubelet node $TAO_REAL_NODE: 2 ranks of a test trainer find rank 0 as \$MASTER_ADDR through DNS, pass a barrier, train and checkpoint"
  run kubectl tao submit demo-real "${real[@]}" -- /bin/trainer --steps 3 --step-delay 300ms
  step "Follow both ranks to the end: the real kubelet closes each stream when its container exits"
  run kubectl tao logs -f demo-real

  step "Cancel a long run while its log is followed: each rank gets SIGTERM, writes a final checkpoint and says so"
  run kubectl tao submit demo-real-long "${real[@]}" -- /bin/trainer --steps 100000 --step-delay 500ms
  follow="$specdir/follow.log"
  # (not shown: let both ranks start)
  for _ in $(seq 300); do
    [ "$(kubectl get pods -l job-name=demo-real-long --field-selector=status.phase=Running -o name | wc -l)" -ge 2 ] && break
    sleep 0.2
  done
  printf '%s$ %s%s\n' "$bold" 'kubectl tao logs -f demo-real-long >follow.log &' "$reset"
  kubectl tao logs -f demo-real-long >"$follow" 2>&1 &
  follower=$!
  # (not shown: let both ranks take two steps)
  for _ in $(seq 300); do
    [ "$(grep -c ' step 2$' "$follow")" -ge 2 ] && break
    sleep 0.2
  done
  run kubectl tao cancel demo-real-long
  wait "$follower" || true
  show cat follow.log
  cat "$follow"
fi

cat <<EOT

${bold}The local cluster is still up. To use it by hand:${reset}
  export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$(command -v kubectl-tao)"):\$PATH
  kubectl tao submit --image busybox --gpus 8 --nodes 2 -- sh -c 'echo rank \$NODE_RANK of \$WORLD_SIZE'
Stop it with: make cluster-down
EOT
