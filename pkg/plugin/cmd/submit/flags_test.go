package submit_test

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/submit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/defaults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/jobflags"
)

// config view and preflight check a defaults file against jobflags.FlagSet, submit against its
// own flags: the two must be the same set, or a key would be accepted by one and refused by the
// other. Every flag a defaults file may set must be declared in jobflags, with the same type
// and default.
func TestJobFlagsAreSubmitsDefaultableFlags(t *testing.T) {
	cmd := submit.NewCmd(nil, genericiooptions.NewTestIOStreamsDiscard(), nil, nil, nil, "v0.0.0")
	own := map[string]*pflag.Flag{}
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) { own[f.Name] = f })
	shared := jobflags.FlagSet()
	shared.VisitAll(func(f *pflag.Flag) {
		s, ok := own[f.Name]
		switch {
		case !ok:
			t.Errorf("jobflags declares --%s, which submit lacks", f.Name)
		case s.Value.Type() != f.Value.Type() || s.DefValue != f.DefValue || s.Usage != f.Usage:
			t.Errorf("--%s differs: submit %s %q, jobflags %s %q", f.Name, s.Value.Type(), s.DefValue, f.Value.Type(), f.DefValue)
		}
	})
	for name := range own {
		if shared.Lookup(name) == nil && !slices.Contains(defaults.NotDefaultable, name) {
			t.Errorf("submit's --%s may be defaulted but is not in jobflags: config view and preflight would refuse it", name)
		}
	}
}
