package triage

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// The findings about a running job's training, beside the pod findings of Analyze.
const (
	// SilentRank: a rank printed, then went quiet while others went on printing.
	SilentRank = "SilentRank"
	// LikelyHang: no rank that ever printed has printed for a while.
	LikelyHang = "LikelyHang"
	// Hang: the supervisor's watchdog (--hang-timeout) ended an attempt as hung.
	Hang = "Hang"
	// IdleGPUs: some ranks' GPUs are idle while the others' are busy.
	IdleGPUs = "IdleGPUs"
	// GPUMemoryFull: a rank's GPU memory is nearly all used.
	GPUMemoryFull = "GPUMemoryFull"
	// ProgressStalled: the epoch has not moved for several epochs' time.
	ProgressStalled = "ProgressStalled"
	// GPUXid: a GPU reports a hardware Xid error.
	GPUXid = "GPUXid"
	// MPIUnreachable: rank 0 of an MPI job gave up waiting for other pods' MPI agents, and
	// never ran mpirun.
	MPIUnreachable = "MPIUnreachable"
)

// Thresholds of the health findings.
const (
	// IdleUtilization is the GPU use (percent) at or below which a GPU counts as idle.
	IdleUtilization = 5.0
	// BusyUtilization is the GPU use (percent) at or above which a GPU counts as busy, for
	// "idle while the others are busy".
	BusyUtilization = 30.0
	// MemoryFullRatio of the GPU's memory in use is an OOM coming.
	MemoryFullRatio = 0.95
	// StalledEpochs is how many epochs' time without a new epoch counts as stalled.
	StalledEpochs = 3
)

// RankHealth is what the health findings look at for one rank (its newest attempt).
type RankHealth struct {
	Rank int
	Pod  string
	Node string
	// LastOutput is the time of the rank's last log line; nil when it never printed.
	LastOutput *time.Time
	GPUs       []GPUHealth
}

// GPUHealth is one GPU's reading; a nil field was not read.
type GPUHealth struct {
	UUID             string
	Utilization      *float64
	MemoryUsedBytes  *int64
	MemoryTotalBytes *int64
	// Xid is the last Xid the GPU reported (DCGM keeps it set); XidBefore is the value first
	// seen while watching, when known, so that only a change during the job is a finding.
	Xid       *int
	XidBefore *int
}

// ProgressHealth is the training's own progress line, as far as the findings need it.
type ProgressHealth struct {
	Epoch        int
	TimePerEpoch time.Duration
	// EpochTime is when the line with that epoch was written.
	EpochTime time.Time
}

// HealthInput is a snapshot of a running job's training.
type HealthInput struct {
	Ranks []RankHealth
	// Progress is nil when the job writes no progress file (or it could not be read).
	Progress *ProgressHealth
	// SilentAfter is how long without output makes a rank silent.
	SilentAfter time.Duration
	// Unbuffered reports whether the job runs Python unbuffered: without it a rank's output
	// can sit in a buffer, and the silence findings say so.
	Unbuffered bool
	// HardwareXid says which Xids are hardware faults.
	HardwareXid func(int) bool
	Now         time.Time
	// Job and Namespace name the job in the commands the suggestions give; without Job they
	// say JOB.
	Job, Namespace string
}

// command is a kubectl tao command about the job: verb, the job's name and namespace, then args.
func (in HealthInput) command(verb, args string) string {
	job := "JOB"
	if in.Job != "" {
		job = in.Job + " -n " + in.Namespace
	}
	return "`" + strings.TrimSpace("kubectl tao "+verb+" "+job+" "+args) + "`"
}

// Health turns a snapshot of a running job into findings, each with its evidence and what to
// do, in a stable order (job-wide first, then by rank).
func Health(in HealthInput) []NodeEvent {
	var out []NodeEvent
	hang := likelyHang(in)
	if hang != nil {
		out = append(out, *hang)
	} else {
		out = append(out, silentRanks(in)...)
	}
	out = append(out, progressStalled(in)...)
	out = append(out, idleGPUs(in)...)
	out = append(out, memoryFull(in)...)
	out = append(out, xids(in)...)
	return out
}

// bufferNote is added to silence findings when output may be buffered.
func (in HealthInput) bufferNote() string {
	if in.Unbuffered {
		return ""
	}
	return " (the job does not run Python unbuffered: its output may sit in a buffer; submit sets PYTHONUNBUFFERED=1 unless told not to)"
}

// likelyHang: every rank that ever printed has been silent for SilentAfter.
func likelyHang(in HealthInput) *NodeEvent {
	var last *RankHealth
	for i := range in.Ranks {
		r := &in.Ranks[i]
		if r.LastOutput == nil {
			continue
		}
		if in.Now.Sub(*r.LastOutput) < in.SilentAfter {
			return nil
		}
		if last == nil || r.LastOutput.After(*last.LastOutput) {
			last = r
		}
	}
	if last == nil {
		return nil
	}
	quiet := in.Now.Sub(*last.LastOutput).Round(time.Second)
	msg := fmt.Sprintf("no rank has printed for %s; rank %d printed last, at %s", quiet, last.Rank, last.LastOutput.UTC().Format(time.RFC3339))
	gpus, idle := countIdle(in.Ranks)
	if gpus > 0 && idle == gpus {
		msg += fmt.Sprintf("; every GPU reads %.0f%% or less: likely a collective waiting for a peer", IdleUtilization)
	}
	t := *last.LastOutput
	return &NodeEvent{
		NodeEventName: LikelyHang, Rank: last.Rank, Pod: last.Pod, Node: last.Node, Time: &t,
		Message: msg + in.bufferNote(), ErrClass: ErrProgram,
		Suggestion: "collect evidence before cancelling: resubmit with --env NCCL_DEBUG=INFO and PyTorch's flight recorder " +
			"(--env TORCH_NCCL_TRACE_BUFFER_SIZE=2000 --env TORCH_NCCL_DUMP_ON_TIMEOUT=1), dump every rank's stacks now with " +
			in.command("stacks", "") + " (a job with the supervisor; else " + in.command("exec", "--rank N -- py-spy dump --pid 1") +
			" where the image has py-spy), and submit with --hang-timeout to have a hang ended and retried by itself",
	}
}

// silentRanks: a rank that printed, then went silent while others printed within SilentAfter.
func silentRanks(in HealthInput) []NodeEvent {
	var out []NodeEvent
	for _, r := range in.Ranks {
		if r.LastOutput == nil || in.Now.Sub(*r.LastOutput) < in.SilentAfter {
			continue
		}
		msg := fmt.Sprintf("rank %d printed last %s ago while other ranks printed within %s", r.Rank, in.Now.Sub(*r.LastOutput).Round(time.Second), in.SilentAfter)
		if n, idle := countIdle([]RankHealth{r}); n > 0 && idle == n {
			msg += fmt.Sprintf(", and its GPUs read %.0f%% or less", IdleUtilization)
		}
		t := *r.LastOutput
		out = append(out, NodeEvent{
			NodeEventName: SilentRank, Rank: r.Rank, Pod: r.Pod, Node: r.Node, Time: &t, Message: msg + in.bufferNote(), ErrClass: ErrProgram,
			Suggestion: fmt.Sprintf("see what it last printed with %s; if it is stuck, dump its stacks with %s (a job with the supervisor; else %s where the image has py-spy)",
				in.command("logs", fmt.Sprintf("--rank %d --tail 20", r.Rank)), in.command("stacks", fmt.Sprintf("--rank %d", r.Rank)),
				in.command("exec", fmt.Sprintf("--rank %d -- py-spy dump --pid 1", r.Rank))),
		})
	}
	return out
}

// countIdle counts the GPUs with a utilisation reading and those of them that are idle.
func countIdle(ranks []RankHealth) (gpus, idle int) {
	for _, r := range ranks {
		for _, g := range r.GPUs {
			if g.Utilization == nil {
				continue
			}
			gpus++
			if *g.Utilization <= IdleUtilization {
				idle++
			}
		}
	}
	return gpus, idle
}

// idleGPUs: some ranks' GPUs all idle while the other ranks' are busy (a straggler, or a data
// loader that cannot keep up).
func idleGPUs(in HealthInput) []NodeEvent {
	var idle, busy []RankHealth
	for _, r := range in.Ranks {
		n, i := countIdle([]RankHealth{r})
		if n == 0 {
			continue
		}
		switch {
		case i == n:
			idle = append(idle, r)
		case meanUtil(r) >= BusyUtilization:
			busy = append(busy, r)
		}
	}
	if len(idle) == 0 || len(busy) == 0 {
		return nil
	}
	var out []NodeEvent
	for _, r := range idle {
		out = append(out, NodeEvent{
			NodeEventName: IdleGPUs, Rank: r.Rank, Pod: r.Pod, Node: r.Node, ErrClass: ErrProgram,
			Message: fmt.Sprintf("rank %d's GPUs read %.0f%% or less while %d other rank(s) average %.0f%% or more", r.Rank, IdleUtilization, len(busy), BusyUtilization),
			Suggestion: "a straggler or a starved data loader: compare its logs with another rank's, and its node's load " +
				"(more DataLoader workers, faster storage); a rank that stopped is found by " + in.command("top", "-w"),
		})
	}
	return out
}

func meanUtil(r RankHealth) float64 {
	var sum float64
	n := 0
	for _, g := range r.GPUs {
		if g.Utilization != nil {
			sum += *g.Utilization
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// memoryFull: a GPU with MemoryFullRatio or more of its memory in use.
func memoryFull(in HealthInput) []NodeEvent {
	var out []NodeEvent
	for _, r := range in.Ranks {
		var full []string
		for _, g := range r.GPUs {
			if g.MemoryUsedBytes == nil || g.MemoryTotalBytes == nil || *g.MemoryTotalBytes <= 0 {
				continue
			}
			if ratio := float64(*g.MemoryUsedBytes) / float64(*g.MemoryTotalBytes); ratio >= MemoryFullRatio {
				full = append(full, fmt.Sprintf("%s at %.0f%%", g.UUID, 100*ratio))
			}
		}
		if len(full) == 0 {
			continue
		}
		out = append(out, NodeEvent{
			NodeEventName: GPUMemoryFull, Rank: r.Rank, Pod: r.Pod, Node: r.Node, ErrClass: ErrProgram,
			Message:    fmt.Sprintf("rank %d's GPU memory is nearly full: %s", r.Rank, strings.Join(full, ", ")),
			Suggestion: "an out-of-memory error may come: a smaller batch size, mixed precision or activation checkpointing leave more room",
		})
	}
	return out
}

// progressStalled: the epoch in the progress file unchanged for StalledEpochs epochs' time.
func progressStalled(in HealthInput) []NodeEvent {
	p := in.Progress
	if p == nil || p.TimePerEpoch <= 0 || p.EpochTime.IsZero() {
		return nil
	}
	since := in.Now.Sub(p.EpochTime)
	if since < StalledEpochs*p.TimePerEpoch {
		return nil
	}
	t := p.EpochTime
	return []NodeEvent{{
		NodeEventName: ProgressStalled, Rank: -1, Time: &t, ErrClass: ErrProgram,
		Message: fmt.Sprintf("epoch %d was reached %s ago, %d times the %s an epoch took", p.Epoch, since.Round(time.Second),
			int(since/p.TimePerEpoch), p.TimePerEpoch.Round(time.Second)),
		Suggestion: "the training may be stuck or much slower than before: check GPU use and the ranks' last output in " + in.command("top", ""),
	}}
}

// xids: a hardware Xid on a GPU of a rank; while watching, only a change from the value first
// seen (DCGM keeps the last Xid set, so an old one may predate the job).
func xids(in HealthInput) []NodeEvent {
	if in.HardwareXid == nil {
		return nil
	}
	var out []NodeEvent
	for _, r := range in.Ranks {
		for _, g := range r.GPUs {
			if g.Xid == nil || *g.Xid == 0 || !in.HardwareXid(*g.Xid) {
				continue
			}
			msg := fmt.Sprintf("GPU %s on node %s reports Xid %d", g.UUID, r.Node, *g.Xid)
			switch {
			case g.XidBefore == nil:
				msg += " (DCGM keeps the last Xid: it may predate this job)"
			case *g.XidBefore == *g.Xid:
				continue
			default:
				msg += fmt.Sprintf(" (it was %d when watching began)", *g.XidBefore)
			}
			out = append(out, NodeEvent{
				NodeEventName: GPUXid, Rank: r.Rank, Pod: r.Pod, Node: r.Node, ErrClass: ErrInfra, Message: msg,
				Suggestion: fmt.Sprintf("a GPU hardware fault: ask the cluster's admins to drain node %s (`kubectl cordon %s`) and check the GPU, "+
					"then resubmit; a --retries job replaces the rank on another node", r.Node, r.Node),
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// WithHealth adds the health findings of a running job to its analysis: when the pods showed
// no issue, the first of them becomes what happened, so that diagnose answers "why is it slow
// or stuck" as it answers "why did it fail".
func WithHealth(a Analysis, findings []NodeEvent) Analysis {
	if len(findings) == 0 {
		return a
	}
	a.JobFailureByNodeEvent = append(a.JobFailureByNodeEvent, findings...)
	if a.ErrClass == nil {
		first := findings[0]
		class := first.ErrClass
		a.ErrClass, a.Suggestion, a.FirstFailure = &class, first.Suggestion, &first
	}
	return a
}

// EndedHung are the findings of the attempts the supervisor's watchdog ended as hung, among a
// job's pods, newest last: a running job's earlier attempts, which top shows beside the
// readings of the attempt that replaced them.
func EndedHung(pods []corev1.Pod, job string) []NodeEvent {
	var out []NodeEvent
	for i := range pods {
		p := &pods[i]
		if !jobspec.Supervised(&p.Spec) {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			t := cs.State.Terminated
			if cs.Name != jobspec.ContainerName || t == nil || t.ExitCode != jobspec.ExitHang {
				continue
			}
			at := t.FinishedAt.Time
			code := t.ExitCode
			msg := "the supervisor ended this attempt as hung"
			if t.Message != "" {
				msg += ": " + t.Message
			}
			out = append(out, NodeEvent{NodeEventName: Hang, Rank: jobpods.Rank(p), Pod: p.Name, Node: p.Spec.NodeName, ExitCode: &code,
				Time: &at, Message: msg, ErrClass: ErrProgram,
				Suggestion: fmt.Sprintf("Its stacks at the hang are in its log: kubectl tao logs %s --rank %d --attempt N.", job, jobpods.Rank(p))})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(*out[j].Time) })
	return out
}
