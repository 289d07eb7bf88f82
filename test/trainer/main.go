// Command trainer is the test workload of the real-node end-to-end tests: a small static
// program that behaves like a torchrun or TAO training job where kubectl-tao's promises are at
// stake, and prints what it experiences so that the tests can check it from the pod's log.
//
//   - It reads the rendezvous variables a multi-node job gets (WORLD_SIZE, NODE_RANK, NNODES,
//     MASTER_ADDR, MASTER_PORT, JOB_COMPLETION_INDEX). Rank 0 listens on MASTER_PORT; every
//     other rank resolves MASTER_ADDR through the cluster's DNS and connects, retrying both
//     until --rendezvous-timeout as torchrun's TCP store client does; rank 0 lets all ranks go
//     once it has seen every one of them (a barrier).
//   - It runs --steps steps (`rank R step k`), writing a checkpoint file under --results after
//     each one.
//   - On SIGTERM (cancel, preemption) it writes a final checkpoint, says so and exits 143, the
//     code a process killed by SIGTERM reports.
//
// The other flags make it a probe: print its argv and environment byte for byte, print a spec
// file, serve HTTP, allocate memory until the kernel kills it, exit with a given code.
//
// Every line it prints starts with "rank R "; lines meant for machines carry JSON after a
// keyword (info, argv, spec). Only the standard library, so that CGO_ENABLED=0 makes a static
// binary that runs in any image: its resolver is Go's own, which reads the pod's
// /etc/resolv.conf (search domains, ndots) as glibc would. The test image carries it as
// /bin/trainer, built with `CGO_ENABLED=0 go build -trimpath -o trainer ./test/trainer`.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The variables kubectl-tao sets on a multi-node job's container (pkg/plugin/job/jobspec), and the
// one the Job controller sets on every pod of an Indexed Job.
const (
	envWorldSize       = "WORLD_SIZE"
	envNodeRank        = "NODE_RANK"
	envNNodes          = "NNODES"
	envMasterAddr      = "MASTER_ADDR"
	envMasterPort      = "MASTER_PORT"
	envCompletionIndex = "JOB_COMPLETION_INDEX"
	envGPUs            = "NVIDIA_VISIBLE_DEVICES"
	envResultsRoot     = "TAO_RESULTS_ROOT"
)

// exitSignalled is what a shell reports for a process ended by SIGTERM (128+15), and what
// torchrun's agent exits with when it is terminated.
const exitSignalled = 143

type options struct {
	steps       int
	stepDelay   time.Duration
	results     string
	exitCode    int
	printArgs   bool
	spec        string
	httpPort    int
	eatMemory   bool
	hold        time.Duration
	rendezvous  bool
	rdzvTimeout time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.steps, "steps", 3, "training steps to run")
	fs.DurationVar(&o.stepDelay, "step-delay", 0, "time each step takes")
	fs.StringVar(&o.results, "results", defaultResults(), "directory the checkpoints go to (rank-R/ below it)")
	fs.IntVar(&o.exitCode, "exit", 0, "exit with this code after the steps")
	fs.BoolVar(&o.printArgs, "print-args", false, "print argv and the environment (an argv line: JSON, with every entry also in hex)")
	fs.StringVar(&o.spec, "spec", "", "read this spec file and print it (a spec line: JSON with its text and hex)")
	fs.IntVar(&o.httpPort, "http", 0, "serve HTTP on this port (GET / says the rank and step)")
	fs.BoolVar(&o.eatMemory, "eat-memory", false, "after the rendezvous, allocate and touch memory until killed")
	fs.DurationVar(&o.hold, "hold", 0, "after the steps, stay up this long (until SIGTERM) before exiting")
	fs.BoolVar(&o.rendezvous, "rendezvous", true, "rendezvous with the other ranks when WORLD_SIZE > 1")
	fs.DurationVar(&o.rdzvTimeout, "rendezvous-timeout", 3*time.Minute, "give up the rendezvous after this long")
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	return o, fs.Args(), nil
}

// defaultResults is where TAO entrypoints write (TAO_RESULTS_ROOT), else a directory every image
// with a /tmp can write.
func defaultResults() string {
	if r := os.Getenv(envResultsRoot); r != "" {
		return r
	}
	return "/tmp/trainer-results"
}

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// trainer is one running rank: what it prints and the state its SIGTERM handler needs.
type trainer struct {
	opts  options
	rank  int
	out   io.Writer
	mu    sync.Mutex // serialises lines and guards step
	step  int
	ckDir string
}

func (t *trainer) printf(format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.printfLocked(format, a...)
}

func (t *trainer) printfLocked(format string, a ...any) {
	fmt.Fprintf(t.out, "rank %d "+format+"\n", append([]any{t.rank}, a...)...)
}

func run(argv []string, stdout, stderr io.Writer) int {
	opts, _, err := parseFlags(argv[1:], stderr)
	if err != nil {
		return 2
	}
	env, err := readEnv()
	if err != nil {
		fmt.Fprintln(stderr, "trainer:", err)
		return 2
	}
	t := &trainer{opts: opts, rank: env.Rank, out: stdout}
	t.ckDir = filepath.Join(opts.results, "rank-"+strconv.Itoa(env.Rank))

	// Installed first, so that a cancel during the rendezvous is handled as during training.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		os.Exit(t.terminated())
	}()

	info, _ := json.Marshal(env.info())
	t.printf("info %s", info)
	if opts.printArgs {
		t.printf("argv %s", argvLine(argv, os.Environ()))
	}
	if opts.spec != "" {
		line, err := specLine(opts.spec)
		if err != nil {
			t.printf("error %v", err)
			return 1
		}
		t.printf("spec %s", line)
	}
	if opts.httpPort != 0 {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(opts.httpPort))
		if err != nil {
			t.printf("error %v", err)
			return 1
		}
		go http.Serve(ln, http.HandlerFunc(t.serveHTTP)) //nolint:errcheck // ends with the process
		t.printf("serving HTTP on %s", ln.Addr())
	}
	if opts.rendezvous && env.WorldSize > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), opts.rdzvTimeout)
		err := t.rendezvous(ctx, env)
		cancel()
		if err != nil {
			t.printf("rendezvous failed: %v", err)
			return 1
		}
	}
	if opts.eatMemory {
		eatMemory(t)
	}
	if err := os.MkdirAll(t.ckDir, 0o755); err != nil {
		t.printf("error %v", err)
		return 1
	}
	for k := 1; k <= opts.steps; k++ {
		time.Sleep(opts.stepDelay)
		t.mu.Lock()
		t.step = k
		t.printfLocked("step %d", k)
		path, err := t.checkpoint(fmt.Sprintf("ckpt-%06d", k))
		if err != nil {
			t.printfLocked("error %v", err)
			t.mu.Unlock()
			return 1
		}
		t.printfLocked("checkpoint %s", path)
		t.mu.Unlock()
	}
	if opts.hold > 0 {
		t.printf("holding for %s", opts.hold)
		time.Sleep(opts.hold)
	}
	t.printf("done, exit code %d", opts.exitCode)
	return opts.exitCode
}

// terminated is the SIGTERM handler: what a training script does when it is preempted. It holds
// the lock, so no step starts or prints after it.
func (t *trainer) terminated() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	path, err := t.checkpoint("final")
	if err != nil {
		t.printfLocked("got SIGTERM at step %d, final checkpoint failed: %v", t.step, err)
		return exitSignalled
	}
	t.printfLocked("got SIGTERM at step %d, wrote final checkpoint %s", t.step, path)
	return exitSignalled
}

// checkpoint writes one checkpoint file; the caller holds t.mu.
func (t *trainer) checkpoint(name string) (string, error) {
	if err := os.MkdirAll(t.ckDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(t.ckDir, name)
	data := fmt.Sprintf("rank=%d step=%d time=%s\n", t.rank, t.step, time.Now().UTC().Format(time.RFC3339Nano))
	return path, os.WriteFile(path, []byte(data), 0o644)
}

func (t *trainer) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	t.mu.Lock()
	step := t.step
	t.mu.Unlock()
	fmt.Fprintf(w, "trainer rank %d step %d\n", t.rank, step)
}

// rankEnv is what the rendezvous variables say.
type rankEnv struct {
	Rank, WorldSize, NNodes                           int
	NodeRank, CompletionIndex, MasterAddr, MasterPort string
	// Set reports which rendezvous variables were present, however empty.
	Set map[string]bool
}

// readEnv reads the rendezvous variables. A job without WORLD_SIZE is one rank; with it,
// NODE_RANK and MASTER_ADDR/MASTER_PORT must be there, as torchrun requires.
func readEnv() (rankEnv, error) {
	e := rankEnv{WorldSize: 1, NNodes: 1, Set: map[string]bool{}}
	for _, k := range []string{envWorldSize, envNodeRank, envNNodes, envMasterAddr, envMasterPort, envCompletionIndex} {
		_, e.Set[k] = os.LookupEnv(k)
	}
	e.NodeRank, e.CompletionIndex = os.Getenv(envNodeRank), os.Getenv(envCompletionIndex)
	e.MasterAddr, e.MasterPort = os.Getenv(envMasterAddr), os.Getenv(envMasterPort)
	atoi := func(name string, dst *int) error {
		v, ok := os.LookupEnv(name)
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q is not a non-negative number", name, v)
		}
		*dst = n
		return nil
	}
	for name, dst := range map[string]*int{envWorldSize: &e.WorldSize, envNNodes: &e.NNodes, envNodeRank: &e.Rank} {
		if err := atoi(name, dst); err != nil {
			return e, err
		}
	}
	if e.WorldSize > 1 {
		if !e.Set[envNodeRank] || e.MasterAddr == "" || e.MasterPort == "" {
			return e, fmt.Errorf("WORLD_SIZE=%d needs NODE_RANK, MASTER_ADDR and MASTER_PORT", e.WorldSize)
		}
		if e.Rank >= e.WorldSize {
			return e, fmt.Errorf("NODE_RANK=%d is not below WORLD_SIZE=%d", e.Rank, e.WorldSize)
		}
	}
	return e, nil
}

// info is the JSON of the info line: the rendezvous variables and what a rank can see of its pod.
func (e rankEnv) info() map[string]any {
	host, _ := os.Hostname()
	m := map[string]any{
		"rank": e.Rank, "world_size": e.WorldSize, "nnodes": e.NNodes,
		"node_rank": e.NodeRank, "job_completion_index": e.CompletionIndex,
		"master_addr": e.MasterAddr, "master_port": e.MasterPort, "hostname": host,
	}
	if ips := ownIPs(); len(ips) > 0 {
		m["ips"] = ips
	}
	if v, ok := os.LookupEnv(envGPUs); ok {
		m["nvidia_visible_devices"] = v
	}
	if fs, err := statFS("/dev/shm"); err == nil {
		m["shm"] = fs
	}
	return m
}

// ownIPs are this rank's addresses other than loopback: in a pod, the pod IP, which the other
// ranks should see MASTER_ADDR resolve to and connections come from.
func ownIPs() []string {
	addrs, _ := net.InterfaceAddrs()
	var ips []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			ips = append(ips, n.IP.String())
		}
	}
	return ips
}

// argvLine prints argv and env exactly: JSON strings cannot carry invalid UTF-8, so every entry
// is also given in hex.
func argvLine(argv, environ []string) string {
	hexes := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = hex.EncodeToString([]byte(s))
		}
		return out
	}
	b, _ := json.Marshal(map[string][]string{
		"args": argv, "args_hex": hexes(argv), "env_hex": hexes(environ),
	})
	return string(b)
}

func specLine(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(map[string]any{"path": path, "bytes": len(data), "text": string(data), "hex": hex.EncodeToString(data)})
	return string(b), nil
}

// eatMemory allocates and touches memory in 8 MiB chunks until the kernel (a cgroup's memory
// limit) kills the process, reporting every 32 MiB. Touching every page is what makes the
// memory resident: untouched allocations would never be charged.
func eatMemory(t *trainer) {
	const chunk = 8 << 20
	var hoard [][]byte
	for {
		b := make([]byte, chunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hoard = append(hoard, b)
		if mib := len(hoard) * chunk >> 20; mib%32 == 0 {
			t.printf("allocated %d MiB", mib)
		}
	}
}
