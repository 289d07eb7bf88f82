package tail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// symlinkErr is what a kubelet says of a container whose log it has removed (with the
// container, once the pod is being deleted).
const symlinkErr = `failed to try resolving symlinks in path "/var/log/pods/ns_train-0_uid/main/0.log": ` +
	`lstat /var/log/pods/ns_train-0_uid/main/0.log: no such file or directory`

// kubeletAnswer writes the kubelet's failure as a kubelet does once it has begun its answer (it
// writes nothing, which sends 200 OK, before it opens the log): the error's text, unstamped and
// without a newline, ends the body. body is what it wrote before.
func kubeletAnswer(body, failure string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		_, _ = w.Write(nil)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, body+failure)
	}
}

// TestStreamLinesStopsAtTheKubeletsError: in a stream asked with timestamps, a line without one
// is the kubelet's error, not the container's: the lines before it are written and counted as
// shown, and the stream ends with that error.
func TestStreamLinesStopsAtTheKubeletsError(t *testing.T) {
	var got bytes.Buffer
	var cur Cursor
	err := streamLines(strings.NewReader(rank0Lines+symlinkErr), &got, "[rank 0] ", false, cur.Resume())
	var kerr *kubeletError
	if !errors.As(err, &kerr) || err.Error() != symlinkErr {
		t.Errorf("error %v, want the kubelet's %q", err, symlinkErr)
	}
	if want := "[rank 0] step 1\n[rank 0] step 2\n"; got.String() != want || !cur.Last.Equal(t0.Add(200*time.Millisecond)) {
		t.Errorf("wrote %q up to %s, want %q up to step 2", got.String(), cur.Last, want)
	}
}

// logAPI plays the API server's pods/log endpoint, through which a kubelet serves a container's
// log, for a real client-go clientset: a followed stream gets what follow answers (by default
// the pod's stamped lines, then it stays open, as KWOK's do), a read that does not follow (the
// last read) gets what read answers.
type logAPI struct {
	lines   string
	follow  func(n int32, w http.ResponseWriter, r *http.Request)
	read    func(http.ResponseWriter)
	follows atomic.Int32
}

func (a *logAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/log") || r.URL.Query().Get("timestamps") != "true" {
		http.Error(w, "unexpected request "+r.URL.String(), http.StatusTeapot)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	if r.URL.Query().Get("follow") != "true" {
		a.read(w)
		return
	}
	n := a.follows.Add(1)
	if a.follow != nil {
		a.follow(n, w, r)
		return
	}
	_, _ = io.WriteString(w, a.lines)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// openOn is the engine's own way to open a log (GetLogs(...).Stream), on a client of srv.
func openOn(t *testing.T, srv *httptest.Server) OpenFunc {
	t.Helper()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, ns, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
		return client.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
	}
}

// rank0Lines are the lines rank 0 printed before its Job is canceled, stamped as asked.
var rank0Lines = serve([]logLine{{t0.Add(100 * time.Millisecond), "step 1"}, {t0.Add(200 * time.Millisecond), "step 2"}}, time.Time{})

// TestFollowLogLostAtTheLastRead: logs -f (and logs -f --save) of a Job that is canceled while
// the kubelet removes the container's log: the last read of the pod fails, in whichever way the
// kubelet and the API server report it. The lines followed until then stay as they were, the
// whole lines the last read got before it failed are added, the failure is said once on
// stderr, and no error text is ever written as a line of the log.
func TestFollowLogLostAtTheLastRead(t *testing.T) {
	status, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: symlinkErr, Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest})
	step3 := serve([]logLine{{t0.Add(300 * time.Millisecond), "step 3"}}, time.Time{})
	for _, tc := range []struct {
		name      string
		read      func(http.ResponseWriter)
		wantLines string // the last read's
		wantErr   string
	}{
		// The kubelet's usual answer: its headers are out before it finds the log gone.
		{"the log removed before the read", kubeletAnswer("", symlinkErr), "", symlinkErr},
		{"the log failing in the middle of the read", kubeletAnswer(step3, `failed to read log file "/var/log/pods/x/main/0.log": input/output error`),
			"step 3\n", `failed to read log file "/var/log/pods/x/main/0.log": input/output error`},
		// What the API server makes of a kubelet that fails before its answer.
		{"the kubelet failing before its answer", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(status)
		}, "", symlinkErr},
		{"the connection cut in the middle of the read", func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, step3+t0.Add(400*time.Millisecond).Format(time.RFC3339Nano)+" step 4 is cut")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, "step 3\n", "unexpected EOF"},
	} {
		for _, save := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, save %v", tc.name, save), func(t *testing.T) {
				srv := httptest.NewServer(&logAPI{lines: rank0Lines, read: tc.read})
				defer srv.Close()
				c, watches := watching(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
				out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
				e := &Engine{Client: c, Open: openOn(t, srv), Out: out, ErrOut: errOut, Retry: 10 * time.Millisecond}
				cfg := Config{Namespace: "ns", Job: "train", Prefix: PrefixRank}
				dir := t.TempDir()
				var s *SaveFiles
				if save {
					var err error
					if s, err = CreateSaveFiles(dir, 0, true); err != nil {
						t.Fatal(err)
					}
					e.Split, cfg.Prefix = s.For, PrefixNone
				}
				lines := func() string {
					if save {
						return dirFiles(t, dir)["rank-0.log"]
					}
					return strings.ReplaceAll(out.String(), "[rank 0] ", "")
				}
				run := startFollow(e, cfg)
				<-watches
				<-watches
				waitFor(t, "the followed lines", func() bool { return lines() == "step 1\nstep 2\n" })

				if err := c.BatchV1().Jobs("ns").Delete(context.Background(), "train", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				run.wait(t)
				if run.err != nil || run.res.Status != jobstatus.Canceled {
					t.Fatalf("Follow = %+v, %v", run.res, run.err)
				}
				if save {
					if _, err := s.Close(nil); err != nil {
						t.Fatal(err)
					}
					if files := dirFiles(t, dir); len(files) != 1 || out.String() != "" {
						t.Errorf("files %q, stdout %q", files, out.String())
					}
				}
				if got, want := lines(), "step 1\nstep 2\n"+tc.wantLines; got != want {
					t.Errorf("rank 0's log:\n%s\nwant:\n%s", got, want)
				}
				if got, want := errOut.String(), "warning: reading the log of rank 0 (pod train-0): "; !strings.HasPrefix(got, want) ||
					!strings.Contains(got, tc.wantErr) || strings.Count(got, "\n") != 1 {
					t.Errorf("stderr %q, want one line %q...%q", got, want, tc.wantErr)
				}
			})
		}
	}
}

// TestFollowLogLostWhileFollowed: a followed stream that drops is reopened, and the kubelet then
// answers each reopen with its error in the body (the log was removed). The error is said once,
// however many reopens get it, and is never a line of the log.
func TestFollowLogLostWhileFollowed(t *testing.T) {
	api := &logAPI{read: kubeletAnswer("", symlinkErr)}
	api.follow = func(n int32, w http.ResponseWriter, r *http.Request) {
		if n > 1 {
			kubeletAnswer("", symlinkErr)(w)
			return
		}
		_, _ = io.WriteString(w, rank0Lines)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, _ := watching(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
	followUntilTheEnd(t, &Engine{Client: c, Open: openOn(t, srv), Out: out, ErrOut: errOut, Retry: time.Millisecond}, Config{Namespace: "ns", Job: "train"})
	waitFor(t, "a few reopens", func() bool { return api.follows.Load() >= 5 })
	if want := "[rank 0] step 1\n[rank 0] step 2\n"; out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if want := "rank 0 (pod train-0): log stream failed, retrying: " + symlinkErr + "\n"; errOut.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut.String(), want)
	}
}

// TestLogsTimestampsKubeletError: logs --timestamps of a pod whose log the kubelet fails to
// read fails with the kubelet's error, which is no line of the log.
func TestLogsTimestampsKubeletError(t *testing.T) {
	api := &logAPI{read: kubeletAnswer("", symlinkErr)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, _ := watching(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	out := &testbuf.Buffer{}
	err := (&Engine{Client: c, Open: openOn(t, srv), Out: out, ErrOut: io.Discard}).Logs(context.Background(), Config{Namespace: "ns", Job: "train", Timestamps: true})
	if want := "reading the log of rank 0 (pod train-0): " + symlinkErr; err == nil || err.Error() != want || out.String() != "" {
		t.Errorf("Logs = %v, stdout %q; want %q and nothing printed", err, out.String(), want)
	}
}
