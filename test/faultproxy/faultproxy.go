// Package faultproxy is an HTTP proxy that tests put between kubectl-tao and the API server to
// make the server misbehave on purpose, request by request: answer 429 with Retry-After, 500 or
// 503, wait before answering, reset the connection, or cut a response (a log stream, a watch)
// after N bytes; or go down altogether (every live request cut, every new one reset) and come
// back. A kubeconfig written by WriteKubeconfig points the plugin at it.
//
// The proxy listens on 127.0.0.1 only and refuses an upstream that is not a loopback address:
// faults are injected on this machine, never towards anything else. It serves plain HTTP on
// loopback and forwards with the upstream config's own transport (TLS, client certificate), so
// the plugin needs no credentials of its own and the proxy no certificate: what is under test
// is the plugin's handling of the answers, not TLS. Upgraded connections (exec, port-forward)
// are not supported.
package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Fault is what the proxy does to a matching request instead of forwarding it untouched. The
// fields combine: Delay comes first, then the first of Reset, Status, CutAfter that is set.
type Fault struct {
	// Delay waits this long before the rest (a slow server).
	Delay time.Duration
	// Reset closes the connection with a TCP reset and no answer.
	Reset bool
	// Status answers with this HTTP status and a Kubernetes Status body (429, 500, 503...).
	Status int
	// RetryAfter, with Status, sends a Retry-After header of this many seconds.
	RetryAfter int
	// CutAfter forwards the request but ends the connection once this many bytes of the
	// response body have been passed on (a stream cut).
	CutAfter int64
}

// Rule scripts a fault for the requests it matches.
type Rule struct {
	// Method matches the HTTP method; empty matches any.
	Method string
	// Path matches the URL path; nil matches any.
	Path *regexp.Regexp
	// Query lists query parameters the request must have with these values (watch=true,
	// follow=true).
	Query map[string]string
	// Times is how many matching requests get the fault; 0 means every one until removed.
	Times int
	Fault Fault
}

func (r *Rule) matches(req *http.Request) bool {
	if r.Method != "" && r.Method != req.Method {
		return false
	}
	if r.Path != nil && !r.Path.MatchString(req.URL.Path) {
		return false
	}
	q := req.URL.Query()
	for k, v := range r.Query {
		if q.Get(k) != v {
			return false
		}
	}
	return true
}

// Request is one request the proxy saw, for counting (how many requests a command made) and
// for asserting which ones got a fault.
type Request struct {
	Method, Path, Query string
	Faulted             bool
}

// Proxy is a running fault proxy.
type Proxy struct {
	upstream *rest.Config
	ln       net.Listener
	srv      *http.Server
	rp       *httputil.ReverseProxy

	mu       sync.Mutex
	rules    []*ruleState
	down     bool
	inflight map[int]context.CancelFunc
	nextID   int
	seen     []Request
}

type ruleState struct {
	Rule
	left int // matches left when Times > 0
}

// Start runs a proxy on a free 127.0.0.1 port in front of the API server upstream describes.
func Start(upstream *rest.Config) (*Proxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q is not a URL", upstream.Host)
	}
	if !isLoopback(target.Hostname()) {
		return nil, fmt.Errorf("faultproxy: upstream %s is not a loopback address; the proxy only injects faults on this machine", upstream.Host)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream transport: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, inflight: map[int]context.CancelFunc{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: transport,
		// Log streams and watches are passed on as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The upstream is down or the request was cut: the client sees a dropped
			// connection, as it would from the server itself.
			reset(w)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL is the proxy's address, http://127.0.0.1:PORT.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Kubeconfig returns a kubeconfig that sends a client through the proxy.
func (p *Proxy) Kubeconfig(namespace string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["faultproxy"] = &clientcmdapi.Cluster{Server: p.URL()}
	cfg.AuthInfos["faultproxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["faultproxy"] = &clientcmdapi.Context{Cluster: "faultproxy", AuthInfo: "faultproxy", Namespace: namespace}
	cfg.CurrentContext = "faultproxy"
	return clientcmd.Write(*cfg)
}

// WriteKubeconfig writes Kubeconfig(namespace) to path.
func (p *Proxy) WriteKubeconfig(path, namespace string) error {
	data, err := p.Kubeconfig(namespace)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Add scripts a fault; the returned func removes it. Rules are tried in the order added; the
// first that matches (and has matches left) applies.
func (p *Proxy) Add(r Rule) (remove func()) {
	rs := &ruleState{Rule: r, left: r.Times}
	p.mu.Lock()
	p.rules = append(p.rules, rs)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range p.rules {
			if x == rs {
				p.rules = append(p.rules[:i], p.rules[i+1:]...)
				return
			}
		}
	}
}

// Left reports how many matches the rules added with Times > 0 still have, summed: 0 once a
// scripted burst has been served in full.
func (p *Proxy) Left() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.rules {
		if r.Times > 0 {
			n += r.left
		}
	}
	return n
}

// Down takes the "server" away: live requests are cut and new ones reset until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for id, cancel := range p.inflight {
		cancel()
		delete(p.inflight, id)
	}
}

// Up ends Down.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Requests returns every request seen so far, in arrival order.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.seen...)
}

// Close stops the proxy and cuts every live request.
func (p *Proxy) Close() error {
	p.Down()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return p.srv.Close()
	}
	return err
}

// pick records req and returns the fault for it (nil: forward untouched), whether the proxy
// is down, and the request's id in inflight.
func (p *Proxy) pick(req *http.Request, cancel context.CancelFunc) (*Fault, bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var fault *Fault
	for _, r := range p.rules {
		if (r.Times == 0 || r.left > 0) && r.matches(req) {
			if r.Times > 0 {
				r.left--
			}
			f := r.Fault
			fault = &f
			break
		}
	}
	p.seen = append(p.seen, Request{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery, Faulted: fault != nil || p.down})
	p.nextID++
	id := p.nextID
	if !p.down {
		p.inflight[id] = cancel
	}
	return fault, p.down, id
}

func (p *Proxy) done(id int) {
	p.mu.Lock()
	delete(p.inflight, id)
	p.mu.Unlock()
}

func (p *Proxy) serve(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	fault, down, id := p.pick(req, cancel)
	defer p.done(id)
	if down {
		reset(w)
		return
	}
	req = req.WithContext(ctx)
	if fault != nil {
		if fault.Delay > 0 {
			select {
			case <-time.After(fault.Delay):
			case <-ctx.Done():
				reset(w)
				return
			}
		}
		switch {
		case fault.Reset:
			reset(w)
			return
		case fault.Status != 0:
			writeStatus(w, fault.Status, fault.RetryAfter)
			return
		case fault.CutAfter > 0:
			w = &cutWriter{ResponseWriter: w, left: fault.CutAfter}
		}
	}
	p.rp.ServeHTTP(w, req)
}

// reset ends the client's connection with a TCP reset, the way a crashed server's kernel
// answers; where the connection cannot be taken over, the handler is aborted instead, which
// closes it.
func reset(w http.ResponseWriter) {
	if cw, ok := w.(*cutWriter); ok {
		w = cw.ResponseWriter
	}
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// writeStatus answers with a Kubernetes Status, which client-go turns into the matching
// API error (IsTooManyRequests, IsServiceUnavailable...).
func writeStatus(w http.ResponseWriter, code, retryAfter int) {
	reason := map[int]string{
		http.StatusTooManyRequests:     "TooManyRequests",
		http.StatusInternalServerError: "InternalError",
		http.StatusServiceUnavailable:  "ServiceUnavailable",
		http.StatusGatewayTimeout:      "Timeout",
	}[code]
	body, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "reason": reason, "code": code,
		"message": fmt.Sprintf("faultproxy: injected %d", code),
	})
	w.Header().Set("Content-Type", "application/json")
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// cutWriter passes on left bytes of the body, then aborts the connection.
type cutWriter struct {
	http.ResponseWriter
	left int64
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if int64(len(b)) < c.left {
		c.left -= int64(len(b))
		return c.ResponseWriter.Write(b)
	}
	_, _ = c.ResponseWriter.Write(b[:c.left])
	c.left = 0
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	// net/http closes the connection without ending the chunked body: the client reads
	// exactly the bytes passed on, then an unexpected EOF.
	panic(http.ErrAbortHandler)
}

// Unwrap lets http.ResponseController reach the connection behind.
func (c *cutWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *cutWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
