package jobspec

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/trickyargs"
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

// kubeletEnv builds a container's environment the way the kubelet and the Job controller would:
// JOB_COMPLETION_INDEX appended last for indexed pods (index != ""), entries expanded in order,
// the downward API's completion-index annotation resolved to index, and other valueFrom entries
// (secrets, other fields) resolved by valueFrom.
func kubeletEnv(c corev1.Container, index string, valueFrom func(corev1.EnvVar) string) (environ []string, vars map[string]string) {
	vars = map[string]string{}
	entries := append([]corev1.EnvVar{}, c.Env...)
	if index != "" {
		entries = append(entries, corev1.EnvVar{Name: EnvCompletionIndex, Value: index})
	}
	for _, e := range entries {
		v := kubeletExpand(e.Value, vars)
		switch f := e.ValueFrom; {
		case f != nil && f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.annotations['"+batchv1.JobCompletionIndexAnnotation+"']":
			v = index
		case f != nil:
			v = valueFrom(e)
		}
		vars[e.Name] = v
		environ = append(environ, e.Name+"="+v)
	}
	return environ, vars
}

// runContainer runs the container's command with the environment kubeletEnv gives it, the
// command expanded against it, exec'd as the container's command.
func runContainer(t *testing.T, c corev1.Container, index string) echoed {
	t.Helper()
	if c.Command[0] == Shell {
		if _, err := os.Stat(Shell); err != nil {
			t.Skipf("%s is not on this machine", Shell)
		}
	}
	environ, vars := kubeletEnv(c, index, func(corev1.EnvVar) string { return "" })
	environ = append(environ, "PATH="+os.Getenv("PATH"), echoEnv+"=1")
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

func TestArgvRunsWithoutAShell(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		s := validSpec()
		s.Nodes = nodes
		s.Command = []string{"/trainer", "--lr", "$(LR)"}
		got := Build(s).Job.Spec.Template.Spec.Containers[0].Command
		want := []string{"/trainer", "--lr", "$$(LR)"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("nodes=%d: command = %q, want %q (no shell in front of an argv)", nodes, got, want)
		}
	}
}

func TestPodSharesItsPIDNamespace(t *testing.T) {
	// The training process must not be PID 1, which ignores SIGTERM without a handler.
	spec := Build(validSpec()).Job.Spec.Template.Spec
	if spec.ShareProcessNamespace == nil || !*spec.ShareProcessNamespace {
		t.Fatalf("shareProcessNamespace = %v, want true", spec.ShareProcessNamespace)
	}
}

func TestUserCommandInvertsContainerCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		staged  bool
		bash    bool
	}{
		{"argv", append([]string{"python"}, tricky...), false, false},
		{"string", []string{`torchrun --node_rank $NODE_RANK "$(date)"`}, false, true},
		{"staged argv", append([]string{"python"}, tricky...), true, false},
		{"staged string", []string{`echo $(A) $$`}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			s.Command = tc.command
			if tc.staged {
				s.Staging = &Staging{Outputs: []string{"/results"}}
			}
			c := ContainerCommand(s)
			got, bash := UserCommand(c, nil)
			if strings.Join(got, "\x00") != strings.Join(tc.command, "\x00") || bash != tc.bash {
				t.Errorf("UserCommand(%q) = %q, %v; want %q, %v", c, got, bash, tc.command, tc.bash)
			}
		})
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
