// Package benchutil is what the local-cluster benchmarks share: running a command and taking
// its wall time, CPU time and peak memory; medians; the machine's description; and a counting
// proxy that tells how many API requests of each kind a command sends.
package benchutil

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Sample is one run of a command.
type Sample struct {
	Wall  time.Duration
	CPU   time.Duration // user + system time of the child
	MaxKB int64         // peak resident set size (getrusage ru_maxrss)
	Lines int
	Out   []byte
}

// timeBin is GNU time. Go starts children with vfork, so a child's own getrusage ru_maxrss
// starts at the parent's resident size (Linux carries the high-water mark across exec): a
// benchmark holding 100 MB would see every command peak at 100 MB. GNU time forks for real,
// so what it reports is the command's own peak.
const timeBin = "/usr/bin/time"

// Measure runs name with args, with env added to the environment, and returns its sample. The
// command's stdout is kept; a failure includes its stderr. Peak memory comes from GNU time
// when it is installed, else from getrusage (an upper bound, see timeBin).
func Measure(env []string, name string, args ...string) (Sample, error) {
	var rssFile string
	if _, err := os.Stat(timeBin); err == nil {
		f, err := os.CreateTemp("", "rss")
		if err != nil {
			return Sample{}, err
		}
		rssFile = f.Name()
		f.Close()
		defer os.Remove(rssFile)
		args = append([]string{"-f", "%M", "-o", rssFile, name}, args...)
		name = timeBin
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	s := Sample{Wall: time.Since(start), Lines: bytes.Count(out.Bytes(), []byte{'\n'}), Out: out.Bytes()}
	if cmd.ProcessState != nil {
		// time waits for the command, so its children's CPU is the command's.
		s.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			s.MaxKB = ru.Maxrss
		}
	}
	if rssFile != "" {
		b, _ := os.ReadFile(rssFile)
		f := strings.Fields(string(b))
		if len(f) > 0 {
			if kb, perr := strconv.ParseInt(f[len(f)-1], 10, 64); perr == nil {
				s.MaxKB = kb
			}
		}
	}
	if err != nil {
		return s, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, errOut.String())
	}
	return s, nil
}

// Summary is the median of several runs: median wall and CPU time, the highest peak memory.
type Summary struct {
	Wall, CPU time.Duration
	MaxKB     int64
	Runs      int
}

// Median summarises samples.
func Median(xs []Sample) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	walls := make([]time.Duration, len(xs))
	cpus := make([]time.Duration, len(xs))
	var maxKB int64
	for i, x := range xs {
		walls[i], cpus[i] = x.Wall, x.CPU
		maxKB = max(maxKB, x.MaxKB)
	}
	return Summary{Wall: mid(walls), CPU: mid(cpus), MaxKB: maxKB, Runs: len(xs)}
}

func mid(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// MB is a peak RSS in megabytes.
func (s Summary) MB() float64 { return float64(s.MaxKB) / 1024 }

// Row prints one command's line of a comparison table.
func Row(name string, s Summary) {
	fmt.Printf("  %-62s %9s %9s %8.1f MB\n", name, s.Wall.Round(time.Millisecond), s.CPU.Round(time.Millisecond), s.MB())
}

// Header prints the table's header.
func Header() {
	fmt.Printf("  %-62s %9s %9s %11s\n", "command", "wall", "cpu", "peak RSS")
}

// Machine describes where the benchmark runs: CPU model, cores, Go, and the load average now.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s %s; load average %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), LoadAverage())
}

// LoadAverage is /proc/loadavg's first three fields.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Counter is a plain-HTTP proxy on loopback in front of the API server that counts requests
// by kind ("list pods", "watch jobs", "log pods", ...). Commands reach it through the
// kubeconfig it writes. It is for counting only: timings through it are not representative.
type Counter struct {
	Kubeconfig string
	mu         sync.Mutex
	counts     map[string]int
	srv        *http.Server
	dir        string
}

// NewCounter starts a counting proxy for cfg's server, with namespace the kubeconfig's
// default; Close removes the kubeconfig.
func NewCounter(cfg *rest.Config, namespace string) (*Counter, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	c := &Counter{counts: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = rt
	proxy.FlushInterval = -1 // log and watch streams pass through as they come
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.counts[Kind(r)]++
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["counted"] = &clientcmdapi.Cluster{Server: "http://" + ln.Addr().String()}
	kc.AuthInfos["counted"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["counted"] = &clientcmdapi.Context{Cluster: "counted", AuthInfo: "counted", Namespace: namespace}
	kc.CurrentContext = "counted"
	if c.dir, err = os.MkdirTemp("", "benchutil"); err != nil {
		c.Close()
		return nil, err
	}
	c.Kubeconfig = c.dir + "/counted.kubeconfig"
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Kind names a request: verb and resource, e.g. "get jobs", "list pods", "watch pods",
// "log pods", "discovery".
func Kind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/... or /apis/GROUP/VERSION/...
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other " + r.URL.Path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return "discovery"
	}
	resource := parts[0]
	verb := strings.ToLower(r.Method)
	switch {
	case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
		verb = "watch"
	case len(parts) >= 3:
		verb = parts[2] // a subresource: log, status, ...
	case verb == "get" && len(parts) == 1:
		verb = "list"
	}
	return verb + " " + resource
}

// Take returns the counts so far and starts again from zero.
func (c *Counter) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// Close stops the proxy and removes its kubeconfig.
func (c *Counter) Close() {
	_ = c.srv.Close()
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// FormatCounts prints counts sorted by kind, with a total.
func FormatCounts(m map[string]int) string {
	var keys []string
	total := 0
	for k, n := range m {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", m[k], k)
	}
	return fmt.Sprintf("%d requests: %s", total, b.String())
}
