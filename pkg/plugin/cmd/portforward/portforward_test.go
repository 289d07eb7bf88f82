package portforward

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	kpf "k8s.io/kubectl/pkg/cmd/portforward"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

// ddp is the Job whose pods the tests forward to: Indexed, two ranks of one container "tao".
func ddp() *fixture.JobWrapper {
	return fixture.Job("ddp").Namespace("ml").UID("uid-ddp").Indexed().Completions(2).Container(corev1.Container{Name: "tao"})
}

func ddpObjects() []runtime.Object {
	p0 := fixture.RankPod(ddp().Obj(), 0).Name("ddp-0-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodRunning).Obj()
	p1 := fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodPending).Obj()
	return []runtime.Object{ddp().Obj(), p0, p1}
}

// fakeForwarder records what kubectl's port-forward would dial.
type fakeForwarder struct {
	method string
	url    *url.URL
	opts   kpf.PortForwardOptions
}

func (f *fakeForwarder) ForwardPorts(method string, u *url.URL, opts kpf.PortForwardOptions) error {
	f.method, f.url, f.opts = method, u, opts
	return nil
}

func runPortForward(t *testing.T, fw *fakeForwarder, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	f := &fakefactory.Factory{NS: "ml", Client: fake.NewClientset(ddpObjects()...)}
	o := &PortForwardOptions{Address: []string{"localhost"}, factory: f, IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &out},
		newOptions: func(s genericiooptions.IOStreams) *kpf.PortForwardOptions {
			ko := kpf.NewDefaultPortForwardOptions(s)
			ko.PortForwarder = fw
			return ko
		}}
	cmd := o.cobraCommand(f)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return cmd.ExecuteContext(context.Background())
}

func TestPortForward(t *testing.T) {
	fw := &fakeForwarder{}
	if err := runPortForward(t, fw, "ddp", "--address", "0.0.0.0", "6006", ":8080"); err != nil {
		t.Fatal(err)
	}
	if fw.method != "POST" || fw.url.Path != "/api/v1/namespaces/ml/pods/ddp-0-a/portforward" ||
		strings.Join(fw.opts.Ports, ",") != "6006,:8080" || strings.Join(fw.opts.Address, ",") != "0.0.0.0" {
		t.Fatalf("forwarded %s %s ports %v addresses %v", fw.method, fw.url, fw.opts.Ports, fw.opts.Address)
	}
	for _, tc := range []struct {
		args     []string
		wantCode exitcode.Code
		wantMsg  string
	}{
		{[]string{"ddp"}, exitcode.Usage, "at least one [LOCAL_PORT:]REMOTE_PORT, got 1 argument"},
		{[]string{"ddp", "tensorboard"}, exitcode.Usage, `invalid port "tensorboard"`},
		{[]string{"ddp", "--rank", "1", "6006"}, exitcode.Error, "rank 1 of job.batch/ddp is not running"},
		{[]string{"ddp", "--rank", "5", "6006"}, exitcode.NotFound, "has no rank 5"},
		{[]string{"nope", "6006"}, exitcode.NotFound, "not found"},
	} {
		err := runPortForward(t, &fakeForwarder{}, tc.args...)
		if exitcode.Of(err) != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("%v: err %v (exit %d), want exit %d and %q", tc.args, err, exitcode.Of(err), tc.wantCode, tc.wantMsg)
		}
	}
}

func TestParsePort(t *testing.T) {
	for _, ok := range []string{"6006", "8080:6006", ":6006", "0:80"} {
		if err := ParsePort(ok); err != nil {
			t.Errorf("ParsePort(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "tb", "0", "70000", "x:80", "80:", "-1:80", "1:2:3"} {
		if err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
}
