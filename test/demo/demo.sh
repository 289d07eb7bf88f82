#!/usr/bin/env bash
# The demo `make demo` runs: a multi-node GPU job through kubectl-tao on the local cluster.
# Each step is printed as the user would type it. Expects kubectl-tao on PATH and KUBECONFIG set.
set -euo pipefail
# The demo's training script, named as typed from the repository's root (where make runs).
train=$(realpath --relative-to=. "$(dirname "$0")/train.py")

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
for j in "$job" demo-oom demo-forever demo-real demo-real-long demo-train demo-hang demo-elastic; do
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

# follow JOB keeps rank 0's log of JOB in $specdir/JOB.log (a `logs -f` in the background,
# which ends with the job), for wait_line.
declare -A followers
follow() {
  kubectl tao logs -f "$1" --rank 0 >"$specdir/$1.log" 2>&1 &
  followers[$1]=$!
}

# wait_line waits up to 3 minutes for a line of rank 0 of job $1 (followed) that matches $2;
# the demo ends there, with the job's diagnosis, if the job ends first or the line never comes.
wait_line() {
  for _ in $(seq 900); do
    grep -q "$2" "$specdir/$1.log" && return 0
    kill -0 "${followers[$1]}" 2>/dev/null || break
    sleep 0.2
  done
  echo "demo: job $1 printed no line matching $2" >&2
  kubectl tao diagnose "$1" >&2 || true
  exit 1
}

# real_training runs Debian's torch on the real node: a job that keeps its progress through a
# killed rank, `top` while it trains, a hung job that restarts itself, and an elastic job scaled.
real_training() {
  local ns state s3env s3pid began=$SECONDS
  ns=$(kubectl config view --minify -o jsonpath='{..namespace}')
  ns=${ns:-default}
  state=$(dirname "$KUBECONFIG")
  # (not shown: an S3 server for the checkpoints, versitygw on the real node's bridge, whose
  # keys go from a file only this user reads into submit's environment, never on a command line)
  s3env="$specdir/s3.env"
  demo-s3 -host "$TAO_REAL_NODE_IP" -dir "$specdir/s3" -env-file "$s3env" &
  s3pid=$!
  # shellcheck disable=SC2064
  trap "kill $s3pid 2>/dev/null || true; rm -rf '$specdir'" EXIT
  for _ in $(seq 300); do [ -f "$s3env" ] && break; sleep 0.1; done
  set -a
  # shellcheck disable=SC1090
  . "$s3env"
  set +a

  # PET_REDIRECTS and PET_TEE: Debian's torchrun (Python 3.11) reads their default, 0 (and
  # 3), as no value and fails; 1 tees each worker's stdout to the pod's log, prefixed [default0]:.
  local torch=(--image "$TAO_TORCH_IMAGE" --stager-image "$TAO_STAGER_IMAGE" --gpus 1 --memory 3Gi --shm-size 256Mi
    --file "$train:/opt/train.py" --checkpoint-dir /ckpt --env PET_REDIRECTS=1 --env PET_TEE=1
    --node-selector kubectl-tao.dev/real-node=true --toleration kubectl-tao.dev/real-node=true:NoSchedule)
  step "Real training on the real node: Debian's torch, 2 ranks under torchrun, every 5 steps a checkpoint that kubectl-tao keeps in S3 (a versitygw on this machine)"
  run kubectl tao submit demo-train "${torch[@]}" --nodes 2 --retries 2 --env STEPS=20 -- \
    'torchrun --nnodes $NNODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT --nproc_per_node 1 /opt/train.py'
  follow demo-train
  step "And a job that hangs at step 7 (a batch that never comes): with --hang-timeout, kubectl-tao restarts it by itself; we come back to it"
  run kubectl tao submit demo-hang "${torch[@]}" --retries 1 --hang-timeout 30s --env HANG_AT=7 --env STEPS=12 -- python3 /opt/train.py

  step "And an elastic job of 1 to 2 ranks (--nodes 1:2), whose whole command is torchrun and the script: we scale it later"
  run kubectl tao submit demo-elastic "${torch[@]}" --nodes 1:2 --env STEPS=1000 --env PET_RDZV_CONF=last_call_timeout=5 -- torchrun /opt/train.py
  follow demo-elastic

  # (not shown: wait for step 7 of demo-train, and tell the dcgm-exporter stand-in what its GPUs read)
  wait_line demo-train 'step 7 loss'
  local pod i=0
  for pod in $(kubectl get pods -l job-name=demo-train -o name); do
    mkdir -p "$state/gpu-metrics/$ns"
    printf 'util=%d\nmem_used_mib=%d\nxid=0\n' $((91 - 7 * i)) $((30412 + 128 * i)) >"$state/gpu-metrics/$ns/${pod#pod/}"
    i=$((i + 1))
  done
  sleep 2
  step "top: each rank's GPU (from the dcgm-exporter stand-in) and the training's progress, read from its status.json"
  run kubectl tao top demo-train

  step "Kill rank 1's training process, as a crash would: the attempt fails, and the next one goes on after the last checkpoint"
  run kubectl tao exec demo-train --rank 1 -- python3 -c 'import os; os.kill(int(open("/tmp/train.pid").read()), 9)'
  run kubectl tao wait demo-train --timeout 5m
  run kubectl tao status demo-train
  show kubectl tao logs demo-train --rank 0 '|' grep attempt
  kubectl tao logs demo-train --rank 0 | grep attempt

  step "The hung job: no sign of life from any rank for 30 s, so each rank's stacks went into its log and the job started again"
  run kubectl tao wait demo-hang --timeout 5m
  show kubectl tao logs demo-hang '|' grep -E "'attempt|hang:|File \"/opt/train.py\"'"
  kubectl tao logs demo-hang | grep -E 'attempt|hang:|File "/opt/train.py"'

  step "The elastic job: scale it to 1 rank while it trains; torchrun's agents meet again at the new size"
  wait_line demo-elastic 'step 3 loss'
  run kubectl tao scale demo-elastic --nodes 1 --wait --timeout 3m
  run kubectl tao status demo-elastic
  run kubectl tao cancel demo-elastic
  kill "$s3pid" 2>/dev/null || true
  printf '%s(the real training above took %d s)%s\n' "$dim" $((SECONDS - began)) "$reset"
}

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

  if [ -z "${TAO_TORCH_IMAGE:-}" ] || [ -z "${TAO_STAGER_IMAGE:-}" ]; then
    step "Real training: skipped, ${TAO_TORCH_IMAGE_SKIP:-the real node has no stager image (make demo builds it; a cluster started before by make cluster-up lacks it: make cluster-down first)}"
  else
    real_training
  fi
fi

cat <<EOT

${bold}The local cluster is still up. To use it by hand:${reset}
  export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$(command -v kubectl-tao)"):\$PATH
  kubectl tao submit --image busybox --gpus 8 --nodes 2 -- sh -c 'echo rank \$NODE_RANK of \$WORLD_SIZE'
Stop it with: make cluster-down
EOT
