package defaults

import (
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/jobflags"
)

// Fuzz targets of the defaults file (make fuzz-short, make fuzz): what Parse accepts, Render
// writes back to a file that parses the same; what Check accepts, Apply sets without an error,
// so a defaults file never passes `config view` and then breaks submit.

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: nvcr.io/x:1\n  gpus: 8\n  toleration:\n  - dedicated=ml:NoSchedule\n  ttl: 1h\n",
		"apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  --env: [A=1, 'B=x: y']\n  no-capacity-check: true\n",
		"apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\n",
		"apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  gpus: 08\n  retries: 0x2\n",
		"apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  file: a:/b\n",
		"apiVersion: v2\nkind: Config\n", "submit: {}\n", "[]", "", "a: &x 1\nb: *x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("config.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatalf("Parse refused it (%v) but returned %+v", err, file)
			}
			if !strings.HasPrefix(err.Error(), "config.yaml") {
				t.Fatalf("Parse: the error does not name the file: %v", err)
			}
			return
		}
		out, err := Render(file)
		if err != nil {
			t.Fatalf("Render(%+v): %v", file, err)
		}
		back, err := Parse("config.yaml", out)
		if err != nil {
			t.Fatalf("Render wrote a file Parse refuses (%v):\n%s", err, out)
		}
		if !reflect.DeepEqual(settings(back), settings(file)) {
			t.Fatalf("Render then Parse changed the settings: %+v, then %+v:\n%s", file.Submit, back.Submit, out)
		}
		if Check(file, jobflags.FlagSet()) != nil {
			return
		}
		flags := jobflags.FlagSet()
		applied, err := Apply(file, flags)
		if err != nil {
			t.Fatalf("Check accepted the file but Apply refused it: %v\n%s", err, data)
		}
		if len(applied) != len(file.Submit) {
			t.Fatalf("Apply set %v of %d settings", applied, len(file.Submit))
		}
	})
}

// settings are s without the lines, which Render does not keep.
func settings(f *File) []Setting {
	var out []Setting
	for _, s := range f.Submit {
		s.Line = 0
		out = append(out, s)
	}
	return out
}

// FuzzCheckValue holds Check's reading of a value to the flag's own: for every submit flag
// (numbers, booleans, durations, strings), Check accepts a value exactly when setting the flag
// to it succeeds.
func FuzzCheckValue(f *testing.F) {
	for _, s := range []string{"8", "08", "0x10", "1_000", "-1", "+2", "true", "1", "T", "1h", "90m", "1.5s", "5", "", "9223372036854775808", "1e3", "1:3", "3:2", "A"} {
		f.Add(uint8(0), s)
	}
	var names []string
	jobflags.FlagSet().VisitAll(func(fl *pflag.Flag) { names = append(names, fl.Name) })
	f.Fuzz(func(t *testing.T, which uint8, v string) {
		name := names[int(which)%len(names)]
		checked := checkValue(jobflags.FlagSet().Lookup(name), v)
		set := jobflags.FlagSet().Lookup(name).Value.Set(v)
		if (checked == nil) != (set == nil) {
			t.Fatalf("--%s %q: Check says %v, the flag says %v", name, v, checked, set)
		}
	})
}
