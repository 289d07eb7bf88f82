# The demo's training script: a small linear model trained with DistributedDataParallel over
# gloo, one process per pod under torchrun. Every rank saves {"step", "model", "optim"} every
# SAVE_EVERY steps into $TAO_CHECKPOINT_DIR, which kubectl-tao keeps in S3; at every start it
# goes on after the newest step any rank has (a retried pod finds what kubectl-tao restored, a
# worker torchrun restarts in place finds its own). Rank 0 prints a line per step and appends
# TAO's status.json, which `kubectl tao top` reads. HANG_AT=N makes rank 0 of the first attempt
# stop printing at step N and wait for ever, as a stuck data loader would. Its pid is in
# /tmp/train.pid.
import datetime, glob, json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(os.environ.get("STEPS", "40"))
save_every = int(os.environ.get("SAVE_EVERY", "5"))
delay = float(os.environ.get("STEP_DELAY", "0.5"))
hang_at = int(os.environ.get("HANG_AT", "-1"))
ckpt = os.environ["TAO_CHECKPOINT_DIR"]
attempt = os.environ.get("TAO_ATTEMPT", "1")


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# Where `kubectl tao exec` finds this process to kill it.
with open("/tmp/train.pid", "w") as f:
    f.write(str(os.getpid()))
if "RANK" not in os.environ:
    # Run without torchrun (a job of one pod): a world of one process.
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ranks = f"{world} rank" + ("s" if world != 1 else "")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(16, 1))
optim = torch.optim.SGD(model.parameters(), lr=0.05)
target = torch.randn(16, 1)

# Resume: the ranks agree on the newest saved step, and the lowest rank that has it sends it.
newest, state = -1, None
for path in glob.glob(f"{ckpt}/step-*.pt"):
    try:
        s = torch.load(path)
    except Exception:
        continue
    if s["step"] > newest:
        newest, state = s["step"], s
t = torch.tensor([newest])
dist.all_reduce(t, op=dist.ReduceOp.MAX)
start = int(t.item()) + 1
if start > 0:
    holder = torch.tensor([rank if newest == start - 1 else world])
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    box = [state if rank == holder.item() else None]
    dist.broadcast_object_list(box, src=int(holder.item()))
    model.module.load_state_dict(box[0]["model"])
    optim.load_state_dict(box[0]["optim"])
    if rank == 0:
        say(f"attempt {attempt}: resumed at step {start}, after the checkpoint step-{start - 1}.pt, with {ranks}")
elif rank == 0:
    say(f"attempt {attempt}: started at step 0 with {ranks}")

os.makedirs("/results", exist_ok=True)
t0 = time.time()
for step in range(start, steps):
    if rank == 0 and step == hang_at and attempt == "1":
        say(f"attempt {attempt}: step {step} waits for a batch that never comes")
        time.sleep(1e9)
    x = torch.randn(64, 16)
    loss = ((model(x) - x @ target) ** 2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    if step % save_every == save_every - 1:
        torch.save({"step": step, "model": model.module.state_dict(), "optim": optim.state_dict()}, f"{ckpt}/step-{step}.pt")
    if rank == 0:
        say(f"step {step} loss {loss.item():.4f}")
        per = (time.time() - t0) / (step - start + 1)
        now = time.gmtime()
        with open("/results/status.json", "a") as f:
            f.write(json.dumps({
                "date": f"{now.tm_mon}/{now.tm_mday}/{now.tm_year}", "time": f"{now.tm_hour}:{now.tm_min}:{now.tm_sec}",
                "status": "RUNNING", "epoch": step + 1, "max_epoch": steps,
                "time_per_epoch": str(datetime.timedelta(seconds=per)),
                "eta": str(datetime.timedelta(seconds=round(per * (steps - step - 1)))),
                "kpi": {"loss": round(loss.item(), 4)}}) + "\n")
    time.sleep(delay)
dist.destroy_process_group()
if rank == 0:
    say(f"attempt {attempt}: done, {steps} steps")
