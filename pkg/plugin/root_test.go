package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/version"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
)

func execute(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), Deps{
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Getenv:     func(string) string { return "" },
		Factory:    &fakefactory.Factory{},
		RandomName: func() string { return "abcde" },
	}, args)
	return code, out.String(), errOut.String()
}

func TestHelpShowsKubectlTao(t *testing.T) {
	code, out, _ := execute("--help")
	if code != 0 || !strings.Contains(out, "kubectl tao [command]") || !strings.Contains(out, "--kubeconfig") ||
		!strings.Contains(out, "-n, --namespace") || !strings.Contains(out, "--as string") {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
	if strings.Contains(out, "stage") || !strings.Contains(out, "delete-artifacts") {
		t.Fatalf("the hidden stage command is listed, or delete-artifacts is not:\n%s", out)
	}
	code, out, _ = execute("submit", "--help")
	if code != 0 || !strings.Contains(out, "kubectl tao submit [NAME] --image IMAGE") {
		t.Fatalf("exit %d, submit help:\n%s", code, out)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	code, out, errOut := execute("sumbit")
	if code != 2 || out != "" || !strings.Contains(errOut, `unknown command "sumbit"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestVersion(t *testing.T) {
	code, out, errOut := execute("version", "-o", "json")
	var info version.Info
	if code != 0 || errOut != "" || json.Unmarshal([]byte(out), &info) != nil || info.Version == "" || info.GoVersion == "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := execute("version", "-o", "xml"); code != 2 || !strings.Contains(errOut, `unable to match a printer suitable for the output format "xml"`) {
		t.Fatalf("version -o xml: exit %d, %q", code, errOut)
	}
	if code, out, _ := execute("version"); code != 0 || !strings.HasPrefix(out, "kubectl-tao v") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

func TestWrongArgumentCountIsAUsageErrorEverywhere(t *testing.T) {
	for _, args := range [][]string{{"version", "extra"}, {"status"}, {"wait", "a", "b"}, {"stage", "install"}, {"delete-artifacts"}} {
		if code, _, errOut := execute(args...); code != 2 || !strings.Contains(errOut, "See 'kubectl tao") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
	}
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct{ argv, want []string }{
		{[]string{"kubectl-tao", "submit", "x"}, []string{"submit", "x"}},
		{[]string{"/tao-stager/kubectl-tao", "stage", "run", "--", "true"}, []string{"stage", "run", "--", "true"}},
		// mpirun's remote shell: its arguments are never the plugin's flags.
		{[]string{"/tao-stager/tao-mpi-agent", "-x", "job-1.job", "orted", "--help"}, []string{"stage", "mpi-agent", "-x", "job-1.job", "orted", "--help"}},
		{[]string{"/tao-stager/tao-mpi-ssh", "-x", "job-1.job", "hydra_pmi_proxy", "-h"}, []string{"stage", "mpi-ssh", "-x", "job-1.job", "hydra_pmi_proxy", "-h"}},
		{nil, nil},
	} {
		if got := Args(tc.argv); strings.Join(got, " ") != strings.Join(tc.want, " ") || len(got) != len(tc.want) {
			t.Errorf("Args(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
	// Through the whole tree: the agent's own usage error, not the plugin's help.
	code, _, errOut := execute(Args([]string{"tao-mpi-agent", "--help"})...)
	if code != 255 || !strings.Contains(errOut, "tao-mpi-agent: want `[OPTIONS] HOST COMMAND...`: no host") {
		t.Errorf("tao-mpi-agent --help: exit %d, stderr %q", code, errOut)
	}
}
