package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// The hang watchdog (submit --hang-timeout D). A rank's sign of life is any line its command
// prints, any file written under its checkpoint directory, and, where nvidia-smi is in the
// image, a GPU busier than BusyGPU percent. In data-parallel training only rank 0 prints, and a
// rank that hangs stops every rank's progress at the next collective, so the ranks share their
// signs of life: each reports its own to rank 0's supervisor (EnvSupervisorAddr) and reads back
// the newest of all, and the job is hung when no rank has shown one for D. Every rank then
// sees it within D and a tick, ends its command and exits jobspec.ExitHang, and the Job starts
// them all again.

// BusyGPU is the utilisation, in percent, above which a GPU counts as working: a long
// evaluation that prints nothing but keeps the GPUs busy is not a hang.
const BusyGPU = 5

// hangConfig is the watchdog's part of the pod's environment.
type hangConfig struct {
	timeout time.Duration
	// addr is rank 0's supervisor (host:port) in a multi-node job, "" otherwise.
	addr      string
	rank      int
	pod, node string
	// checkpoints is the directory whose writes count as life, "" when none.
	checkpoints string
}

func hangFromEnv(getenv func(string) string, rank int) (*hangConfig, error) {
	v := getenv(jobspec.EnvHangTimeout)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("$%s=%q: want a number of seconds, 1 or more", jobspec.EnvHangTimeout, v)
	}
	return &hangConfig{timeout: time.Duration(n) * time.Second, addr: getenv(jobspec.EnvSupervisorAddr), rank: rank,
		pod: getenv(s3layout.EnvPodName), node: getenv(jobspec.EnvNodeName), checkpoints: getenv(s3layout.EnvStageCheckpointDir)}, nil
}

// rankLife is one rank's newest sign of life, as the ranks share it.
type rankLife struct {
	Rank int    `json:"rank"`
	Pod  string `json:"pod,omitempty"`
	Node string `json:"node,omitempty"`
	// Last is the sign's time in Unix nanoseconds.
	Last int64 `json:"last"`
}

// lives is what rank 0's supervisor answers: every rank's newest sign of life.
type lives struct {
	Ranks []rankLife `json:"ranks"`
}

// Hang is what the watchdog found.
type Hang struct {
	Timeout time.Duration
	// Last is the job's newest sign of life.
	Last time.Time
	// First is the rank whose newest sign of life is the oldest: the first to go silent.
	First rankLife
}

// watchdog watches one rank.
type watchdog struct {
	cfg   hangConfig
	start time.Time
	own   atomic.Int64
	// gpu reads the highest utilisation of the container's GPUs; nil without nvidia-smi.
	gpu  func(ctx context.Context) (int, error)
	sayf func(format string, args ...any)

	mu    sync.Mutex
	ranks map[int]rankLife
	// peerErr is said once, when rank 0 cannot be reached.
	peerErr bool
	client  *http.Client
	server  *http.Server
}

func newWatchdog(cfg hangConfig, sayf func(string, ...any)) *watchdog {
	w := &watchdog{cfg: cfg, start: time.Now(), sayf: sayf, ranks: map[int]rankLife{}, client: &http.Client{Timeout: 5 * time.Second}}
	w.own.Store(w.start.UnixNano())
	if smi, err := exec.LookPath("nvidia-smi"); err == nil {
		w.gpu = func(ctx context.Context) (int, error) { return gpuUtilisation(ctx, smi) }
	}
	return w
}

// alive records a sign of life at t.
func (w *watchdog) alive(t time.Time) {
	n := t.UnixNano()
	for {
		old := w.own.Load()
		if n <= old || w.own.CompareAndSwap(old, n) {
			return
		}
	}
}

// serve makes rank 0's supervisor the place the ranks share their signs of life. It listens
// before the command starts, so that the other ranks find it as soon as they run.
func (w *watchdog) serve() error {
	if w.cfg.addr == "" || w.cfg.rank != 0 {
		return nil
	}
	_, port, err := net.SplitHostPort(w.cfg.addr)
	if err != nil {
		return fmt.Errorf("$%s=%q: %w", jobspec.EnvSupervisorAddr, w.cfg.addr, err)
	}
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return fmt.Errorf("the hang watchdog cannot listen on port %s: %w", port, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/lives", w.handle)
	w.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.server.Serve(l) }()
	return nil
}

// handle records a rank's report and answers with every rank's newest sign of life.
func (w *watchdog) handle(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rank, err1 := strconv.Atoi(q.Get("rank"))
	last, err2 := strconv.ParseInt(q.Get("last"), 10, 64)
	if err1 != nil || err2 != nil || rank < 1 {
		http.Error(rw, "want rank (1 or more) and last", http.StatusBadRequest)
		return
	}
	w.record(rankLife{Rank: rank, Pod: q.Get("pod"), Node: q.Get("node"), Last: last})
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(w.snapshot())
}

// record keeps a rank's newest report; an older one (a report that arrived late) changes
// nothing.
func (w *watchdog) record(l rankLife) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.ranks[l.Rank]; !ok || l.Last >= old.Last {
		w.ranks[l.Rank] = l
	}
}

// snapshot is every rank's newest sign of life known here, this rank's own included.
func (w *watchdog) snapshot() lives {
	w.record(rankLife{Rank: w.cfg.rank, Pod: w.cfg.pod, Node: w.cfg.node, Last: w.own.Load()})
	w.mu.Lock()
	defer w.mu.Unlock()
	out := lives{}
	for _, l := range w.ranks {
		out.Ranks = append(out.Ranks, l)
	}
	slices.SortFunc(out.Ranks, func(a, b rankLife) int { return a.Rank - b.Rank })
	return out
}

// share reports this rank's sign of life to rank 0 and takes in what it knows of the others.
func (w *watchdog) share(ctx context.Context) {
	if w.cfg.addr == "" || w.cfg.rank == 0 {
		return
	}
	q := url.Values{"rank": {strconv.Itoa(w.cfg.rank)}, "pod": {w.cfg.pod}, "node": {w.cfg.node}, "last": {strconv.FormatInt(w.own.Load(), 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.cfg.addr+"/lives?"+q.Encode(), nil)
	if err != nil {
		return
	}
	resp, err := w.client.Do(req)
	var got lives
	if err == nil {
		err = json.NewDecoder(resp.Body).Decode(&got)
		_ = resp.Body.Close()
	}
	if err != nil {
		if !w.peerErr && ctx.Err() == nil {
			// Rank 0 may not be up yet, or gone: this rank then goes by its own signs alone.
			w.peerErr = true
			w.sayf("hang watchdog: rank 0's supervisor at %s cannot be reached (%v): watching this rank's own signs of life until it can", w.cfg.addr, err)
		}
		return
	}
	w.peerErr = false
	for _, l := range got.Ranks {
		w.record(l)
	}
}

// tick is how often the watchdog looks: a tenth of the timeout, between 50 ms and 10 s.
func (w *watchdog) tick() time.Duration {
	return min(max(w.cfg.timeout/10, 50*time.Millisecond), 10*time.Second)
}

// watch looks every tick until ctx ends (nil) or the job has shown no sign of life for the
// timeout (the hang).
func (w *watchdog) watch(ctx context.Context) *Hang {
	t := time.NewTicker(w.tick())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		w.look(ctx)
		w.share(ctx)
		if h := w.hung(time.Now()); h != nil {
			return h
		}
	}
}

// look checks the signs a rank shows without printing: its checkpoint files and its GPUs.
func (w *watchdog) look(ctx context.Context) {
	if w.cfg.checkpoints != "" {
		if t := newestWrite(w.cfg.checkpoints); t.After(w.start) {
			w.alive(t)
		}
	}
	if w.gpu != nil {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		util, err := w.gpu(gctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			w.sayf("hang watchdog: nvidia-smi failed (%v): GPU activity is not watched", err)
			w.gpu = nil
		case err == nil && util > BusyGPU:
			w.alive(time.Now())
		}
	}
}

// hung reports the hang at now, nil while some rank showed life within the timeout. An
// attempt's start (the imports, the rendezvous, a first batch) has twice the timeout before its
// first sign of life: a new attempt on a busy node must not be ended before it could print.
func (w *watchdog) hung(now time.Time) *Hang {
	if now.Sub(w.start) < 2*w.cfg.timeout {
		return nil
	}
	all := w.snapshot().Ranks
	var newest int64
	first := all[0]
	for _, l := range all {
		newest = max(newest, l.Last)
		if l.Last < first.Last {
			first = l
		}
	}
	last := time.Unix(0, newest)
	if now.Sub(last) < w.cfg.timeout {
		return nil
	}
	return &Hang{Timeout: w.cfg.timeout, Last: last, First: first}
}

func (w *watchdog) close() {
	if w.server != nil {
		_ = w.server.Close()
	}
}

// newestWrite is the newest modification time of a file under dir (the zero time when none).
func newestWrite(dir string) time.Time {
	var newest time.Time
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
		return nil
	})
	return newest
}

// gpuUtilisation is the highest utilisation nvidia-smi reports for the container's GPUs.
func gpuUtilisation(ctx context.Context, smi string) (int, error) {
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return 0, err
	}
	return parseUtilisation(string(out))
}

// parseUtilisation reads nvidia-smi's CSV of utilization.gpu, one GPU a line; a GPU that
// cannot say ("[N/A]", as a MIG slice does) is not counted.
func parseUtilisation(out string) (int, error) {
	highest, read := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		l = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), "%"))
		if l == "" || strings.HasPrefix(l, "[") {
			continue
		}
		n, err := strconv.Atoi(l)
		if err != nil {
			return 0, fmt.Errorf("unexpected utilization.gpu %q", l)
		}
		highest, read = max(highest, n), read+1
	}
	if read == 0 {
		return 0, errors.New("no GPU reported its utilisation")
	}
	return highest, nil
}

// describe is the hang's line.
func (h *Hang) describe() string {
	who := "rank " + strconv.Itoa(h.First.Rank)
	if h.First.Node != "" {
		who += " on node " + h.First.Node
	}
	return fmt.Sprintf("hang: no rank has printed a line, written a checkpoint file or kept a GPU busy for %s (the last sign of life at %s); %s went silent first",
		h.Timeout, h.Last.UTC().Format(time.TimeOnly), who)
}
