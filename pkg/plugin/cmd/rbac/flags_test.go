package rbac_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

// --gpu-metrics-namespace "" is a usage error, and nothing is printed.
func TestGPUMetricsEmptyNamespace(t *testing.T) {
	r := cmdtest.Cmd{NS: "ml"}.Run(context.Background(), "rbac", "--gpu-metrics", "--gpu-metrics-namespace", "")
	if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.Contains(r.Stderr, "--gpu-metrics-namespace must name a namespace") {
		t.Fatalf("%+v", r)
	}
}
