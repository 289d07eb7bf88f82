package jobspec

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/internal/trickyargs"
)

// echoEnv makes this test binary act as the user's program: it prints its argv and environment
// as JSON and exits, so the wrapper tests can see exactly what a training process would get.
const echoEnv = "JOBSPEC_TEST_ECHO"

func TestMain(m *testing.M) {
	if os.Getenv(echoEnv) == "1" {
		out, _ := json.Marshal(map[string]any{"args": os.Args[1:], "env": os.Environ()})
		os.Stdout.Write(out)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tricky are arguments a shell would mangle if the wrapper re-parsed or re-quoted them; the
// real-node e2e test sends the same through a real kubelet.
var tricky = trickyargs.Args

// kubeletExpand does what the kubelet does to a container's command and env before running it
// (k8s.io/kubernetes third_party/forked/golang/expansion): $(VAR) becomes VAR's value when VAR
// is defined, $$ becomes $, anything else stays.
func kubeletExpand(in string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		if in[i] != '$' || i+1 == len(in) {
			b.WriteByte(in[i])
			continue
		}
		switch next := in[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(in[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := in[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

type echoed struct {
	Args []string `json:"args"`
	Env  map[string]string
}

// runContainer runs the container's command the way the kubelet and the Job controller would:
// env entries expanded in order, JOB_COMPLETION_INDEX appended last (as the Job controller
// does) for indexed pods, the command expanded against them, then exec'd with /bin/bash.
func runContainer(t *testing.T, c corev1.Container, index string) echoed {
	t.Helper()
	if _, err := os.Stat(Shell); err != nil {
		t.Skipf("%s is not on this machine", Shell)
	}
	vars := map[string]string{}
	environ := []string{"PATH=" + os.Getenv("PATH"), echoEnv + "=1"}
	entries := c.Env
	if index != "" {
		entries = append(entries, corev1.EnvVar{Name: EnvCompletionIndex, Value: index})
	}
	for _, e := range entries {
		v := kubeletExpand(e.Value, vars)
		vars[e.Name] = v
		environ = append(environ, e.Name+"="+v)
	}
	argv := make([]string, len(c.Command))
	for i, a := range c.Command {
		argv[i] = kubeletExpand(a, vars)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = environ
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running %q: %v\n%s", argv, err, out)
	}
	var raw struct {
		Args []string `json:"args"`
		Env  []string `json:"env"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("decoding %q: %v", out, err)
	}
	e := echoed{Args: raw.Args, Env: map[string]string{}}
	for _, kv := range raw.Env {
		k, v, _ := strings.Cut(kv, "=")
		e.Env[k] = v
	}
	return e
}

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestWrapperPassesArgvExactly(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) {
			s := validSpec()
			s.Nodes = nodes
			s.Command = append([]string{self(t)}, tricky...)
			s.Env = []KeyValue{{"LITERAL", "$(HOME) and $$ and $(WORLD_SIZE)"}}
			got := runContainer(t, Build(s).Job.Spec.Template.Spec.Containers[0], "2")
			if len(got.Args) != len(tricky) {
				t.Fatalf("got %d args %q, want %d %q", len(got.Args), got.Args, len(tricky), tricky)
			}
			for i := range tricky {
				if got.Args[i] != tricky[i] {
					t.Errorf("arg %d = %q, want %q", i, got.Args[i], tricky[i])
				}
			}
			if v := got.Env["LITERAL"]; v != "$(HOME) and $$ and $(WORLD_SIZE)" {
				t.Errorf("LITERAL = %q, want it unexpanded", v)
			}
		})
	}
}

func TestWrapperSetsRendezvousVariables(t *testing.T) {
	for _, form := range []string{"argv", "string"} {
		t.Run(form, func(t *testing.T) {
			s := validSpec()
			s.Name, s.Nodes, s.GPUs, s.MasterPort = "ddp", 4, 8, 12345
			s.Command = []string{self(t), "x"}
			if form == "string" {
				// A bash string: the user's own $VAR references are expanded by bash, in the pod.
				s.Command = []string{fmt.Sprintf(`%q "$NODE_RANK" 'it'"'"'s' "$MASTER_ADDR:$MASTER_PORT"`, self(t))}
			}
			got := runContainer(t, Build(s).Job.Spec.Template.Spec.Containers[0], "3")
			want := map[string]string{
				"WORLD_SIZE": "4", "NNODES": "4", "NUM_GPU_PER_NODE": "8", "NPROC_PER_NODE": "8",
				"NODE_RANK": "3", "MASTER_ADDR": "ddp-0.ddp", "MASTER_PORT": "12345",
			}
			for k, v := range want {
				if got.Env[k] != v {
					t.Errorf("%s = %q, want %q", k, got.Env[k], v)
				}
			}
			if form == "string" {
				wantArgs := []string{"3", "it's", "ddp-0.ddp:12345"}
				if strings.Join(got.Args, "|") != strings.Join(wantArgs, "|") {
					t.Errorf("args = %q, want %q", got.Args, wantArgs)
				}
			}
		})
	}
}

func TestWrapperSingleNodeStringIsTheSDKForm(t *testing.T) {
	s := validSpec()
	s.Command = []string{fmt.Sprintf(`X='$(HOME)'; exec %q "$X" "a b"`, self(t))}
	got := runContainer(t, Build(s).Job.Spec.Template.Spec.Containers[0], "")
	if strings.Join(got.Args, "|") != "$(HOME)|a b" {
		t.Errorf("args = %q", got.Args)
	}
	if _, ok := got.Env["NODE_RANK"]; ok {
		t.Errorf("single-node job exported NODE_RANK")
	}
}

func TestWrapperRefusesToRunOutsideAnIndexedJob(t *testing.T) {
	if _, err := os.Stat(Shell); err != nil {
		t.Skipf("%s is not on this machine", Shell)
	}
	s := validSpec()
	s.Nodes = 2
	s.Command = []string{"true"}
	c := Build(s).Job.Spec.Template.Spec.Containers[0]
	argv := make([]string, len(c.Command))
	for i, a := range c.Command {
		argv[i] = kubeletExpand(a, nil)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "JOB_COMPLETION_INDEX") {
		t.Fatalf("wrapper without JOB_COMPLETION_INDEX: err=%v out=%q, want a failure naming the variable", err, out)
	}
}

func TestKubeletExpand(t *testing.T) {
	vars := map[string]string{"A": "1"}
	for in, want := range map[string]string{
		"$(A)": "1", "$(B)": "$(B)", "$$(A)": "$(A)", "$$": "$", "$x": "$x", "a$": "a$", "$(": "$(", "$$$$": "$$",
	} {
		if got := kubeletExpand(in, vars); got != want {
			t.Errorf("kubeletExpand(%q) = %q, want %q", in, got, want)
		}
	}
}
