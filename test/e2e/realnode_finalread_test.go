//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRealNodeLogsFollowFinalRead follows 2-rank jobs whose rank 0 ends seconds before rank 1,
// through a proxy that counts (and, per case, fails) the pod log requests the real kubelet
// would serve. It proves the path a real kubelet takes at the end of a follow: a rank whose
// stream ended after its container stopped is not read again, a rank never followed is read in
// full once the Job is over, and a final read that fails is one warning, not a lost exit code.
func TestRealNodeLogsFollowFinalRead(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	// Rank 0 prints and exits after 1 s, rank 1 after 5 s: when the Job completes, rank 0's
	// container has long stopped and its stream has ended.
	const script = `echo "first $JOB_COMPLETION_INDEX"; sleep $((1 + 4*JOB_COMPLETION_INDEX)); echo "last $JOB_COMPLETION_INDEX"`
	cases := []struct {
		name string
		// fail answers 500 to a log request of the rank instead of forwarding it.
		fail func(rank int, follow bool) bool
		// rank1 is what stdout must hold of rank 1; warn, whether stderr warns of its final read.
		rank1 []string
		warn  bool
	}{
		{name: "finished ranks are skipped", fail: func(int, bool) bool { return false },
			rank1: []string{"first 1", "last 1"}},
		{name: "a rank never followed is read at the end", fail: func(rank int, follow bool) bool { return rank == 1 && follow },
			rank1: []string{"first 1", "last 1"}},
		{name: "a failed final read warns", fail: func(rank int, _ bool) bool { return rank == 1 },
			warn: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t)
			job := fmt.Sprintf("tiers%d", i)
			p := newLogProxy(t, job, tc.fail)
			submitReal(t, n, ns, job, []string{"--nodes", "2", "--shm-size", "64Mi"}, script)
			follow := taoBackgroundEnv(t, []string{"KUBECONFIG=" + p.kubeconfig}, "logs", "-f", job, "-n", ns)
			r := follow.wait(t, 2*time.Minute)
			if r.code != 0 {
				t.Fatalf("logs -f of a completed job: want exit 0, got %s", r)
			}
			want := "[rank 0] first 0\n[rank 0] last 0\n"
			for _, l := range tc.rank1 {
				want += "[rank 1] " + l + "\n"
			}
			// Ranks are followed at once, so their lines interleave: compare each rank's lines.
			for rank, lines := range rankLogs(t, want) {
				if got := rankLogs(t, r.stdout)[rank]; strings.Join(got, "\n") != strings.Join(lines, "\n") {
					t.Errorf("rank %d: want each line once, in order, %q; got %s", rank, lines, r)
				}
			}
			if got := rankLogs(t, r.stdout)[1]; len(tc.rank1) == 0 && len(got) != 0 {
				t.Errorf("rank 1: every log request failed, yet lines were printed: %s", r)
			}
			warned := regexp.MustCompile(`(?m)^warning: reading the log of rank 1 \(pod ` + job + `-1-[a-z0-9]+\): `).MatchString(r.stderr)
			if warned != tc.warn {
				t.Errorf("a warning about rank 1's final read: want %v, got %s", tc.warn, r)
			}
			if strings.Count(r.stderr, "\n") > 2 {
				t.Errorf("stderr: want at most a line per event, got %s", r)
			}
			reqs := p.requests()
			if reqs[logReq{rank: 0, follow: false}] != 0 {
				t.Errorf("rank 0 ended before the Job: want no final read of it, got %d (requests %v)", reqs[logReq{rank: 0}], reqs)
			}
			if reqs[logReq{rank: 0, follow: true}] == 0 {
				t.Errorf("rank 0 was never followed (requests %v)", reqs)
			}
			if tc.name != cases[0].name && reqs[logReq{rank: 1, follow: false}] != 1 {
				t.Errorf("rank 1 was never followed: want one final read of it, got requests %v", reqs)
			}
		})
	}
}

// logReq is one kind of pod log request: the rank of the pod, and whether it follows.
type logReq struct {
	rank   int
	follow bool
}

// logProxy stands between kubectl-tao and the API server on loopback, with the test's own
// credentials, counting the log requests of one Job's pods and answering 500 to those fail
// picks. Everything else goes through untouched, streams unbuffered.
type logProxy struct {
	kubeconfig string
	mu         sync.Mutex
	counts     map[logReq]int
}

func newLogProxy(t *testing.T, job string, fail func(rank int, follow bool) bool) *logProxy {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport, rp.FlushInterval = transport, -1
	p := &logProxy{counts: map[logReq]int{}}
	logPath := regexp.MustCompile(`^/api/v1/namespaces/[^/]+/pods/` + regexp.QuoteMeta(job) + `-([0-9]+)-[a-z0-9]+/log$`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := logPath.FindStringSubmatch(r.URL.Path); m != nil {
			k := logReq{follow: r.URL.Query().Get("follow") == "true"}
			k.rank, _ = strconv.Atoi(m[1]) // the pattern matched digits
			p.mu.Lock()
			p.counts[k]++
			p.mu.Unlock()
			if fail(k.rank, k.follow) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"failed by the test's proxy","reason":"InternalError","code":500}`)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: %s\nusers:\n- name: proxy\n  user: {}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n", srv.URL)
	if err := os.WriteFile(p.kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *logProxy) requests() map[logReq]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[logReq]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}
