package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// upstream is a stand-in API server: /api/v1/namespaces/default/pods/p/log streams 100 lines
// of 10 bytes, one per millisecond; anything else answers "ok".
func upstream(t *testing.T) *rest.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/log") {
			for i := 0; i < 100; i++ {
				fmt.Fprintf(w, "line %04d\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
			}
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(upstream(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// answer is what get read: the status, the headers and the body.
type answer struct {
	code   int
	header http.Header
}

func get(t *testing.T, p *Proxy, path string) (answer, []byte, error) {
	t.Helper()
	resp, err := http.Get(p.URL() + path)
	if err != nil {
		return answer{}, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header}, body, err
}

func TestStatusBurstThenForward(t *testing.T) {
	p := start(t)
	p.Add(Rule{Method: http.MethodGet, Path: regexp.MustCompile(`^/api`), Times: 2, Fault: Fault{Status: 429, RetryAfter: 3}})
	for i := 0; i < 2; i++ {
		resp, body, err := get(t, p, "/api/v1/pods")
		if err != nil {
			t.Fatal(err)
		}
		if resp.code != 429 || resp.header.Get("Retry-After") != "3" || !strings.Contains(string(body), `"reason":"TooManyRequests"`) {
			t.Fatalf("request %d: %d %v %s, want 429 with Retry-After 3 and a Status", i, resp.code, resp.header, body)
		}
	}
	if p.Left() != 0 {
		t.Fatalf("Left() = %d after the burst, want 0", p.Left())
	}
	resp, body, err := get(t, p, "/api/v1/pods")
	if err != nil || resp.code != 200 || string(body) != "ok" {
		t.Fatalf("after the burst: %v %v %q, want 200 ok", err, resp, body)
	}
	// A path the rule does not match was never faulted.
	reqs := p.Requests()
	if len(reqs) != 3 || !reqs[0].Faulted || !reqs[1].Faulted || reqs[2].Faulted {
		t.Fatalf("requests %+v, want two faulted then one forwarded", reqs)
	}
}

// client-go turns the injected answers into the API errors a caller tests for, and retries
// a 429 with Retry-After by itself.
func TestClientGoSeesInjectedErrors(t *testing.T) {
	p := start(t)
	kc, err := p.Kubeconfig("default")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	remove := p.Add(Rule{Fault: Fault{Status: 503}})
	_, err = cs.CoreV1().Pods("default").Get(context.Background(), "x", metav1.GetOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("503: got %v, want ServiceUnavailable", err)
	}
	remove()
	p.Add(Rule{Times: 1, Fault: Fault{Status: 429, RetryAfter: 1}})
	begin := time.Now()
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/api/v1/namespaces/default/pods/p/log").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("429 then success: %v", err)
	}
	if d := time.Since(begin); d < time.Second {
		t.Fatalf("retried after %s, want Retry-After's 1s honoured", d)
	}
}

func TestCutAfterBytes(t *testing.T) {
	p := start(t)
	p.Add(Rule{Query: map[string]string{"follow": "true"}, Fault: Fault{CutAfter: 25}})
	_, body, err := get(t, p, "/api/v1/namespaces/default/pods/p/log?follow=true")
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut stream: error %v, want unexpected EOF", err)
	}
	if string(body) != "line 0000\nline 0001\nline " {
		t.Fatalf("cut stream read %q, want the first 25 bytes", body)
	}
	// Without the query the rule does not apply.
	_, body, err = get(t, p, "/api/v1/namespaces/default/pods/p/log")
	if err != nil || len(body) != 1000 {
		t.Fatalf("uncut stream: %v, %d bytes, want 1000", err, len(body))
	}
}

func TestResetAndDelay(t *testing.T) {
	p := start(t)
	remove := p.Add(Rule{Fault: Fault{Reset: true}})
	if _, _, err := get(t, p, "/api"); err == nil {
		t.Fatal("reset: request succeeded")
	}
	remove()
	p.Add(Rule{Fault: Fault{Delay: 300 * time.Millisecond}})
	begin := time.Now()
	resp, body, err := get(t, p, "/api")
	if err != nil || resp.code != 200 || string(body) != "ok" {
		t.Fatalf("delayed: %v %v %q", err, resp, body)
	}
	if d := time.Since(begin); d < 300*time.Millisecond {
		t.Fatalf("answered after %s, want at least the 300ms delay", d)
	}
}

func TestDownCutsLiveStreamsAndUpRestores(t *testing.T) {
	p := start(t)
	resp, err := http.Get(p.URL() + "/api/v1/namespaces/default/pods/p/log?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	p.Down()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("the live stream ended cleanly when the proxy went down, want it cut")
	}
	if _, _, err := get(t, p, "/api"); err == nil {
		t.Fatal("a request while down succeeded")
	}
	p.Up()
	if resp, body, err := get(t, p, "/api"); err != nil || resp.code != 200 || string(body) != "ok" {
		t.Fatalf("after Up: %v %q", err, body)
	}
}

func TestRefusesNonLoopbackUpstream(t *testing.T) {
	for _, host := range []string{"https://10.0.0.1:6443", "https://example.com", "not a url"} {
		if _, err := Start(&rest.Config{Host: host}); err == nil {
			t.Errorf("Start(%q) succeeded, want it refused", host)
		}
	}
}
