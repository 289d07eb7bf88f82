// Package cmdtest runs kubectl tao's real commands in tests: the root command, built by
// plugin.Execute, against fakefactory.Factory, with in-memory streams, a chosen environment
// and, when asked, a fake clock. Tests of a command's glue read its exit code and output the
// way a user sees them.
package cmdtest

import (
	"context"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// Result is what a run of the command left: its exit code and what it wrote.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Cmd is one run of kubectl tao. The zero value of each field is the usual test setting.
type Cmd struct {
	// Client, Dynamic and NS are the cluster most tests want: the command reaches Client
	// (usually a fake clientset) and Dynamic (nil: an empty fake) in namespace NS ("default"
	// when empty), through a fakefactory.Factory; with ClientErr set, asking for a client
	// fails with it instead (no cluster).
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	NS        string
	ClientErr error
	// Env is the whole environment the command sees; nil: no variable is set.
	Env map[string]string
	// Stdin is what the command reads from standard input.
	Stdin string
	// Now, when set, is the time of a fake clock (AGE columns); zero leaves the real clock.
	Now time.Time
	// RandomName, when set, is the suffix of every generated Job name.
	RandomName string
	// Stdout and Stderr, when set, receive the output, for a test that reads it while the
	// command runs; Result holds it all the same.
	Stdout, Stderr *testbuf.Buffer
}

// Run executes kubectl tao with args, as the binary does, and returns its exit code and output.
func (c Cmd) Run(ctx context.Context, args ...string) Result {
	out, errOut := c.Stdout, c.Stderr
	if out == nil {
		out = &testbuf.Buffer{}
	}
	if errOut == nil {
		errOut = &testbuf.Buffer{}
	}
	d := plugin.Deps{
		Streams: genericiooptions.IOStreams{In: strings.NewReader(c.Stdin), Out: out, ErrOut: errOut},
		Getenv:  func(k string) string { return c.Env[k] },
		Factory: &fakefactory.Factory{NS: c.NS, Client: c.Client, Dynamic: c.Dynamic, ClientErr: c.ClientErr},
	}
	if !c.Now.IsZero() {
		d.Clock = clocktesting.NewFakePassiveClock(c.Now)
	}
	if c.RandomName != "" {
		d.RandomName = func() string { return c.RandomName }
	}
	code := plugin.Execute(ctx, d, args)
	return Result{Code: code, Stdout: out.String(), Stderr: errOut.String()}
}
