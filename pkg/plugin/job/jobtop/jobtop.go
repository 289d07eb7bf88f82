// Package jobtop reads how a running job's training is doing: each rank's GPU use (from
// dcgm-exporter through the API server's pod proxy, one request per node, or nvidia-smi in the
// rank where no exporter runs), when each rank last printed (one one-line log read per rank),
// and the training's own progress file (one exec in rank 0). All reads run in parallel with a
// bound; a read that fails leaves its part empty and says why once, in Notes.
package jobtop

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/gpumetrics"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/progress"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// Where a rank's GPU numbers came from.
const (
	SourceDCGM      = "dcgm-exporter"
	SourceNvidiaSMI = "nvidia-smi"
	SourceNone      = "none"
	// SourceMixed is the job's metricsSource when its ranks used different sources.
	SourceMixed = "mixed"
)

// NvidiaSMIQuery is the command run in a rank where no exporter serves its node.
var NvidiaSMIQuery = []string{"nvidia-smi", "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"}

// Executor runs a command in a container and returns what it wrote to stdout.
type Executor interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string) ([]byte, error)
}

// Reader reads jobs' training health. Keep one Reader for a watch: it remembers the Xid each
// GPU showed first, so that only a change during the watch is a finding.
type Reader struct {
	Client kubernetes.Interface
	// Exec runs nvidia-smi and reads the progress file; nil turns both off.
	Exec Executor
	// Parallel bounds the concurrent execs and exporter reads; LogParallel the concurrent log
	// reads (one per rank, as `logs --tail 1` makes them).
	Parallel    int
	LogParallel int
	// SilentAfter is how long without output makes a rank silent (findings).
	SilentAfter time.Duration
	// Watching keeps the first Xid seen per GPU across reads.
	Watching bool
	// ExporterTimeout bounds one exporter read (DefaultExporterTimeout when 0).
	ExporterTimeout time.Duration

	mu        sync.Mutex
	xidFirst  map[string]int
	exporters exporterState
}

// Job is what `top JOB` shows, and its -o json document.
type Job struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	// Status is the job's status word, as `kubectl tao status` says it.
	Status string `json:"status"`
	// Nodes is the number of ranks the job wants now; NodesRange an elastic job's MIN:MAX, which
	// `scale` resizes it within (nil for a job of fixed size).
	Nodes      int32   `json:"nodes"`
	NodesRange *string `json:"nodesRange"`
	// GPUs is the number of GPUs the job asks for (all ranks), in GPUResource.
	GPUs int `json:"gpus"`
	// GPUResource is the resource GPUs counts: whole GPUs, a MIG profile's slices or shared GPUs.
	GPUResource string `json:"gpuResource"`
	// SharedGPU is true when the job's GPUs are shared with other containers (a time-slicing
	// resource, or an exporter that maps a GPU of the job to other pods too): their utilisation
	// and memory are the whole GPU's, not the job's.
	SharedGPU bool `json:"sharedGPU"`
	// Progress is the training's own progress line (TAO's status.json); nil without one.
	Progress *progress.Progress `json:"progress"`
	// MetricsSource is where the GPU numbers came from: dcgm-exporter, nvidia-smi, mixed or none.
	MetricsSource string `json:"metricsSource"`
	Ranks         []Rank `json:"ranks"`
	// Findings are diagnose's finding objects about the training (running jobs only).
	Findings []triage.NodeEvent `json:"findings"`
	// Time is when the reading was taken.
	Time time.Time `json:"time"`

	// Notes say once what kept part of the reading empty (for stderr).
	Notes []string `json:"-"`
	// Unreachable is set when a request of the reading failed because the API server did not
	// answer (outage.Is): the reading is partial, and a watch waits for the next one.
	Unreachable error `json:"-"`
}

// Rank is one rank's newest attempt.
type Rank struct {
	Rank int    `json:"rank"`
	Pod  string `json:"pod"`
	Node string `json:"node"`
	// Attempt numbers the rank's attempts from 1, as `logs --attempt` does.
	Attempt int    `json:"attempt"`
	Phase   string `json:"phase"`
	// LastOutputTime is when the rank last printed; null when it has not printed yet.
	LastOutputTime *time.Time `json:"lastOutputTime"`
	// MetricsSource is where this rank's GPU numbers came from.
	MetricsSource string `json:"metricsSource"`
	// GPUSampleTime is when the GPU numbers were first read: dcgm-exporter serves the same
	// reading until its next collect, and a repeat keeps the time of the first. Null without
	// GPU numbers.
	GPUSampleTime *time.Time `json:"gpuSampleTime"`
	// RepeatedReading is true when the exporter served the GPU numbers an earlier reading of
	// the same Reader showed (it collects every 30 s by default): no new sample.
	RepeatedReading bool             `json:"repeatedReading,omitempty"`
	GPUs            []gpumetrics.GPU `json:"gpus"`

	gpuRequest int
	container  string
	running    bool
}

// Target is one job to read, with its pods.
type Target struct {
	Job  *batchv1.Job
	Pods []corev1.Pod
}

// Read reads the jobs at now: the exporters once for all of them, then every rank's reads.
func (r *Reader) Read(ctx context.Context, targets []Target, now time.Time) []Job {
	out := make([]Job, len(targets))
	nodes := map[string]bool{}
	for i, t := range targets {
		out[i] = r.skeleton(t, now)
		for _, rk := range out[i].Ranks {
			if rk.running && rk.gpuRequest > 0 && rk.Node != "" {
				nodes[rk.Node] = true
			}
		}
	}
	notes := &noteSet{}
	byNode := r.scrapeNodes(ctx, nodes, notes, now)
	lim := limits{logs: make(chan struct{}, r.logParallel()), exec: make(chan struct{}, r.parallel())}
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func(j *Job, t Target) {
			defer wg.Done()
			r.fill(ctx, j, t.Job, byNode, notes, lim, now)
		}(&out[i], targets[i])
	}
	wg.Wait()
	wanted, got := false, false
	for i, t := range targets {
		if out[i].Status == string(jobstatus.Running) {
			// The attempts the watchdog ended as hung first: the readings are of their successors.
			out[i].Findings = append(triage.EndedHung(t.Pods, t.Job.Name), triage.Health(r.healthInput(&out[i], t.Job, now))...)
			wanted = wanted || out[i].GPUs > 0
		}
		got = got || out[i].MetricsSource != SourceNone
	}
	list := notes.list(wanted && !got)
	for i := range out {
		out[i].Notes = list
	}
	return out
}

// skeleton is the job's ranks (the newest attempt of each) and status, before any reading.
func (r *Reader) skeleton(t Target, now time.Time) Job {
	s := jobstatus.Summarize(t.Job.Namespace, t.Job.Name, t.Job, t.Pods, nil, now)
	resource := jobspec.GPUResourceOf(t.Job)
	j := Job{Job: t.Job.Name, Namespace: t.Job.Namespace, Status: string(s.Status), Time: now, Findings: []triage.NodeEvent{}, Ranks: []Rank{},
		GPUResource: string(resource), SharedGPU: jobspec.IsSharedGPUResource(resource), Nodes: s.Nodes, NodesRange: s.NodesRange}
	byName := map[string]*corev1.Pod{}
	for i := range t.Pods {
		byName[t.Pods[i].Name] = &t.Pods[i]
	}
	// Targets orders each rank's pods oldest first: the last one is its newest attempt.
	newest := map[int]tail.Target{}
	var order []int
	for _, tg := range tail.Targets(t.Pods, nil, "", false) {
		if _, seen := newest[tg.Rank]; !seen {
			order = append(order, tg.Rank)
		}
		newest[tg.Rank] = tg
	}
	for _, rank := range order {
		tg := newest[rank]
		pod := byName[tg.Pod]
		rk := Rank{Rank: rank, Pod: tg.Pod, Node: tg.Node, Attempt: tg.Attempt, Phase: string(pod.Status.Phase),
			MetricsSource: SourceNone, GPUs: []gpumetrics.GPU{}, container: tg.Container,
			running: pod.Status.Phase == corev1.PodRunning && tg.Started && !tg.Terminated && pod.DeletionTimestamp == nil}
		// Every rank runs the Job's one pod template: its GPUs are the Job's per rank.
		rk.gpuRequest = int(s.GPUs)
		j.GPUs += rk.gpuRequest
		j.Ranks = append(j.Ranks, rk)
	}
	return j
}

// fill reads each rank's last output and GPU numbers, and the progress file, in parallel.
func (r *Reader) fill(ctx context.Context, j *Job, job *batchv1.Job, byNode map[string]nodeScrape, notes *noteSet, lim limits, now time.Time) {
	var wg sync.WaitGroup
	var unreachable sync.Once
	cutOff := func(err error) {
		if outage.Is(err) {
			unreachable.Do(func() { j.Unreachable = err })
		}
	}
	run := func(sem chan struct{}, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f()
		}()
	}
	// Rank 0 as it is now, for the progress read: the goroutines below write into j.Ranks.
	var rank0 Rank
	if len(j.Ranks) > 0 {
		rank0 = j.Ranks[0]
	}
	for i := range j.Ranks {
		rk := &j.Ranks[i]
		if rk.Phase == string(corev1.PodPending) {
			continue
		}
		run(lim.logs, func() {
			ts, ok, err := tail.LastOutput(ctx, r.Client, j.Namespace, tail.Target{Pod: rk.Pod, Container: rk.container})
			if err != nil {
				cutOff(err)
				notes.add(fmt.Sprintf("could not read the last log line of some ranks (e.g. rank %d: %v)", rk.Rank, short(err)))
				return
			}
			if ok {
				rk.LastOutputTime = &ts
			}
		})
		if !rk.running || rk.gpuRequest == 0 {
			continue
		}
		switch s, ok := byNode[rk.Node]; {
		case !ok:
			notes.absent("no dcgm-exporter runs on the job's nodes (the NVIDIA GPU Operator deploys one)")
		case s.err == nil:
			if gpus := gpumetrics.ForPod(s.gpus, j.Namespace, rk.Pod); len(gpus) > 0 {
				sampled := s.sampled
				rk.GPUs, rk.MetricsSource, rk.GPUSampleTime, rk.RepeatedReading = gpus, SourceDCGM, &sampled, s.repeated
				continue
			}
			notes.gpu(fmt.Sprintf("dcgm-exporter on node %s maps no GPU to the job's pods (its Kubernetes mapping, DCGM_EXPORTER_KUBERNETES, may be off)", rk.Node), true)
		}
		if r.Exec == nil {
			notes.gpu("nvidia-smi cannot be run in the ranks (this client cannot exec)", false)
			continue
		}
		run(lim.exec, func() {
			out, err := r.Exec.Exec(ctx, j.Namespace, rk.Pod, rk.container, NvidiaSMIQuery)
			if err != nil {
				cutOff(err)
				notes.gpu(nvidiaSMINote(err), false)
				return
			}
			gpus, err := gpumetrics.ParseNvidiaSMI(out)
			if err != nil {
				notes.gpu(fmt.Sprintf("nvidia-smi in rank %d printed what it should not: %v", rk.Rank, err), false)
				return
			}
			// nvidia-smi reads the GPUs as they are now: every reading is a new one.
			sampled := now
			rk.GPUs, rk.MetricsSource, rk.GPUSampleTime = gpus, SourceNvidiaSMI, &sampled
		})
	}
	if spec, ok := StatusFileOf(job); ok && r.Exec != nil && len(j.Ranks) > 0 && rank0.Rank == 0 && rank0.running {
		run(lim.exec, func() { j.Progress = r.readProgress(ctx, j.Namespace, rank0, spec) })
	}
	wg.Wait()
	j.MetricsSource = jobSource(j.Ranks)
	for _, rk := range j.Ranks {
		for _, g := range rk.GPUs {
			j.SharedGPU = j.SharedGPU || g.Shared
		}
	}
}

// limits bound the requests of one Read, of all its jobs together.
type limits struct{ logs, exec chan struct{} }

func (r *Reader) parallel() int {
	if r.Parallel > 0 {
		return r.Parallel
	}
	return 16
}

func (r *Reader) logParallel() int {
	if r.LogParallel > 0 {
		return r.LogParallel
	}
	return tail.DefaultMaxLogRequests
}

func jobSource(ranks []Rank) string {
	seen := map[string]bool{}
	for _, rk := range ranks {
		if rk.MetricsSource != SourceNone {
			seen[rk.MetricsSource] = true
		}
	}
	switch len(seen) {
	case 0:
		return SourceNone
	case 1:
		for s := range seen {
			return s
		}
	}
	return SourceMixed
}

func nvidiaSMINote(err error) string {
	msg := err.Error()
	switch {
	case apierrors.IsForbidden(err):
		return "running nvidia-smi in the ranks needs create on pods/exec"
	case strings.Contains(msg, "executable file not found") || strings.Contains(msg, "exit code 127") || strings.Contains(msg, "no such file"):
		return "the image has no nvidia-smi (NVIDIA's NGC images have it, with the utility driver capability)"
	}
	return "nvidia-smi failed: " + short(err)
}

// short keeps the first line of an error: API errors can carry a whole response body.
func short(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// healthInput turns a reading into what the findings look at.
func (r *Reader) healthInput(j *Job, job *batchv1.Job, now time.Time) triage.HealthInput {
	in := triage.HealthInput{SilentAfter: r.SilentAfter, Now: now, HardwareXid: gpumetrics.HardwareXid, Unbuffered: unbuffered(job),
		Job: job.Name, Namespace: job.Namespace}
	if in.SilentAfter <= 0 {
		in.SilentAfter = DefaultSilentAfter
	}
	for _, rk := range j.Ranks {
		if !rk.running {
			continue
		}
		h := triage.RankHealth{Rank: rk.Rank, Pod: rk.Pod, Node: rk.Node, LastOutput: rk.LastOutputTime}
		for _, g := range rk.GPUs {
			gh := triage.GPUHealth{UUID: g.Device(), Utilization: g.Utilization, MemoryUsedBytes: g.MemoryUsedBytes, MemoryTotalBytes: g.MemoryTotalBytes, Xid: g.Xid}
			if g.Xid != nil && r.Watching {
				gh.XidBefore = r.firstXid(g.UUID, *g.Xid)
			}
			h.GPUs = append(h.GPUs, gh)
		}
		in.Ranks = append(in.Ranks, h)
	}
	if p := j.Progress; p != nil && p.Epoch != nil && p.TimePerEpochSeconds != nil && p.EpochTime != nil {
		in.Progress = &triage.ProgressHealth{Epoch: *p.Epoch, TimePerEpoch: time.Duration(*p.TimePerEpochSeconds * float64(time.Second)), EpochTime: *p.EpochTime}
	}
	return in
}

// DefaultSilentAfter is how long without output makes a rank silent unless told otherwise.
const DefaultSilentAfter = 10 * time.Minute

func (r *Reader) firstXid(uuid string, xid int) *int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.xidFirst == nil {
		r.xidFirst = map[string]int{}
	}
	first, ok := r.xidFirst[uuid]
	if !ok {
		r.xidFirst[uuid] = xid
		first = xid
	}
	return &first
}

// unbuffered reports whether the training container runs Python unbuffered.
func unbuffered(job *batchv1.Job) bool {
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name != jobspec.ContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == jobspec.EnvPythonUnbuffered {
				return e.Value != "" || e.ValueFrom != nil
			}
		}
	}
	return false
}

// noteSet keeps each note once. What kept GPU numbers away is kept apart: when no job got any,
// it becomes the one line that says why and what would enable them.
type noteSet struct {
	mu       sync.Mutex
	seen     map[string]bool
	general  []string
	exporter []string // why dcgm-exporter gave nothing
	smi      []string // why nvidia-smi gave nothing
	// missing says no exporter runs where one was wanted: worth saying only when nothing else
	// gave numbers (nvidia-smi in its place is the normal way on such clusters).
	missing []string
}

func (n *noteSet) absent(s string) { n.put(&n.missing, s) }

func (n *noteSet) add(s string) { n.put(&n.general, s) }

// gpu records why a source gave no GPU numbers; exporter tells dcgm-exporter from nvidia-smi.
func (n *noteSet) gpu(s string, exporter bool) {
	if exporter {
		n.put(&n.exporter, s)
	} else {
		n.put(&n.smi, s)
	}
}

func (n *noteSet) put(to *[]string, s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[string]bool{}
	}
	if !n.seen[s] {
		n.seen[s] = true
		*to = append(*to, s)
	}
}

// list is the notes to print. none: GPU numbers were wanted and no source gave any, said in
// one line; else each source's trouble, with what was used instead.
func (n *noteSet) list(none bool) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := append([]string(nil), n.general...)
	sort.Strings(out)
	exporter, smi := sorted(n.exporter), sorted(n.smi)
	if none {
		why := append(append(sorted(n.missing), exporter...), smi...)
		if len(why) == 0 {
			why = []string{"no source answered"}
		}
		return append(out, "no GPU numbers: "+strings.Join(why, "; "))
	}
	for _, e := range exporter {
		if len(smi) == 0 {
			e += "; using nvidia-smi in the ranks instead"
		}
		out = append(out, e)
	}
	for _, s := range smi {
		out = append(out, "some ranks show no GPU numbers: "+s)
	}
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
