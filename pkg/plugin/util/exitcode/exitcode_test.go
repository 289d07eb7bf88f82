package exitcode

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestOf(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	tests := []struct {
		err  error
		want Code
	}{
		{nil, OK},
		{errors.New("x"), Error},
		{Usagef("bad"), Usage},
		{fmt.Errorf("wrapped: %w", Usagef("bad")), Usage},
		{apierrors.NewNotFound(gr, "j"), NotFound},
		{fmt.Errorf("creating: %w", apierrors.NewAlreadyExists(gr, "j")), AlreadyExists},
		{apierrors.NewForbidden(gr, "j", errors.New("rbac")), Forbidden},
		{apierrors.NewUnauthorized("who are you"), NoCluster},
		{refused, NoCluster},
		{WithCode(NoCapacity, errors.New("full")), NoCapacity},
		{WithCode(Timeout, apierrors.NewNotFound(gr, "j")), Timeout},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestExplain(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api/v1/nodes?limit=500", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	err := Explain(fmt.Errorf("listing nodes: %w", refused))
	if Of(err) != NoCluster || !strings.HasPrefix(err.Error(), "Could not reach the Kubernetes API server at https://127.0.0.1:6443: listing nodes: dial: connection refused\n") {
		t.Errorf("Explain(refused) = %v", err)
	}
	// A connection lost mid-way keeps what was being done around it, and the URL's path goes.
	reset := &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443/apis/batch/v1/namespaces/ml/jobs/x", Err: &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}}
	err = Explain(fmt.Errorf("starting job.batch/x: %w\n(the objects already created were deleted again)", reset))
	want := "Could not reach the Kubernetes API server at https://127.0.0.1:6443: starting job.batch/x: read: connection reset by peer\n(the objects already created were deleted again)\n"
	if Of(err) != NoCluster || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Explain(reset) = %q, want it to start with %q", err, want)
	}
	if Of(Explain(refused)) != NoCluster || !strings.HasPrefix(Explain(refused).Error(), "Could not reach the Kubernetes API server at https://127.0.0.1:6443: dial: connection refused\n") {
		t.Errorf("Explain(bare url.Error) = %v", Explain(refused))
	}
	err = Explain(apierrors.NewUnauthorized("token expired"))
	if Of(err) != NoCluster || !strings.HasPrefix(err.Error(), "Could not authenticate to a Kubernetes cluster") {
		t.Errorf("Explain(unauthorized) = %v", err)
	}
	plain := errors.New("plain")
	if Explain(plain) != plain {
		t.Errorf("Explain changed an error it has nothing to add to")
	}
}

// README.md documents the same table; scripts read the README, so the two must never drift.
func TestTableMatchesReadme(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (\d+) \| (\w+) \| (.+) \|$`)
	var got []string
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		got = append(got, m[1]+" "+m[2]+" "+m[3])
	}
	var want []string
	for i, r := range Table {
		if int(r.Code) != i {
			t.Errorf("Table[%d] has code %d: codes must be dense and in order", i, r.Code)
		}
		want = append(want, fmt.Sprintf("%d %s %s", r.Code, r.Name, r.Meaning))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("README exit-code table:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPassthrough(t *testing.T) {
	if Passthrough(0) != nil {
		t.Error("Passthrough(0) is an error")
	}
	err := fmt.Errorf("run: %w", Passthrough(143))
	if code, ok := PassedThrough(err); !ok || code != 143 {
		t.Errorf("PassedThrough = %d, %v", code, ok)
	}
	if _, ok := PassedThrough(errors.New("other")); ok {
		t.Error("a plain error passed through")
	}
}

// repoRoot walks up from the test's directory to go.mod, so the test does not depend on how
// deep this package sits.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
