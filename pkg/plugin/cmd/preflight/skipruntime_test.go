package preflight_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/preflightcheck"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// TAO_K8S_SKIP_NODE_RUNTIME_CHECK=1 turns the node-runtime FAIL of nodes with an old driver
// into an INFO that says it was skipped; any other value, or none, judges the nodes.
func TestPreflightSkipNodeRuntimeCheck(t *testing.T) {
	old := fixture.Node("a").Label(preflightcheck.LabelDriverMajor, "470").Label(preflightcheck.LabelCUDAMajor, "11").
		Label(preflightcheck.LabelCUDAMinor, "0").GPUs(8).Allocatable(corev1.ResourceMemory, "1Ti").Obj()
	for _, tc := range []struct {
		env  map[string]string
		code int
		want string
	}{
		{nil, int(exitcode.PreflightFailed), "no GPU node meets driver 580+"},
		{map[string]string{preflightcheck.EnvSkipNodeRuntimeCheck: "0"}, int(exitcode.PreflightFailed), "no GPU node meets driver 580+"},
		{map[string]string{preflightcheck.EnvSkipNodeRuntimeCheck: "1"}, 0, "skipped: TAO_K8S_SKIP_NODE_RUNTIME_CHECK=1"},
	} {
		c := newClient(nil, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, old)
		r := cmdtest.Cmd{NS: "ml", Client: c, Env: tc.env}.Run(context.Background(), "preflight", "--gpus", "8")
		if r.Code != tc.code || !strings.Contains(r.Stdout, tc.want) {
			t.Errorf("env %v: exit %d, want %d and %q:\n%s%s", tc.env, r.Code, tc.code, tc.want, r.Stdout, r.Stderr)
		}
	}
}
