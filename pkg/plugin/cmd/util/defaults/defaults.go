// Package defaults reads the defaults file: what a user would otherwise repeat on every
// `kubectl tao submit` (image, pull secrets, tolerations, /dev/shm, ...), kept in
// $XDG_CONFIG_HOME/kubectl-tao/config.yaml. Its `submit:` keys are submit's own flag names and
// its values are written as on the command line, so the file needs no schema of its own and
// every submit flag (present and future) can be defaulted. Flags given on the command line
// always win; for a repeatable flag, the command line's values replace the file's list.
//
// Reading and merging are pure (data in, settings out); only Apply and ApplyShared touch a flag
// set.
package defaults

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	yaml "go.yaml.in/yaml/v3"
)

// The file's identity. A new apiVersion comes with a new schema; this one is refused by
// releases that do not know it rather than half-read.
const (
	APIVersion = "kubectl-tao.dev/v1alpha1"
	Kind       = "Config"
)

// Environment variables that locate the file.
const (
	// EnvConfig names the file explicitly; it must then exist.
	EnvConfig = "TAO_CONFIG"
	envXDG    = "XDG_CONFIG_HOME"
	envHome   = "HOME"
)

// NotDefaultable are submit flags a defaults file may not set: they describe one run (what to
// print, whether to wait, which local files to ship), not a user's standing preferences.
var NotDefaultable = []string{
	"dry-run", "output", "template", "show-managed-fields", "allow-missing-template-keys",
	"wait", "follow", "stuck-timeout", "file", "workdir", "help", "resume-from", "resume-from-uid",
}

// Setting is one `submit:` entry: the flag it sets and its values as written.
type Setting struct {
	Flag string
	// Values holds one value for a scalar, each item for a list.
	Values []string
	// List is true when the file wrote a YAML list.
	List bool
	// Line is where the key is, for messages.
	Line int
}

// File is a parsed defaults file.
type File struct {
	Path   string
	Submit []Setting
}

// Path is the defaults file to read: $TAO_CONFIG (explicit: it must exist), else
// $XDG_CONFIG_HOME/kubectl-tao/config.yaml, else ~/.config/kubectl-tao/config.yaml. As the XDG
// spec says, a relative $XDG_CONFIG_HOME is ignored. "" means there is nowhere to look.
func Path(getenv func(string) string) (path string, explicit bool) {
	if p := getenv(EnvConfig); p != "" {
		return p, true
	}
	if x := getenv(envXDG); filepath.IsAbs(x) {
		return filepath.Join(x, "kubectl-tao", "config.yaml"), false
	}
	if h := getenv(envHome); h != "" {
		return filepath.Join(h, ".config", "kubectl-tao", "config.yaml"), false
	}
	return "", false
}

// Load finds and parses the defaults file. No file (where none was named explicitly) is nil
// and no error.
func Load(getenv func(string) string, readFile func(string) ([]byte, error)) (*File, error) {
	path, explicit := Path(getenv)
	if path == "" {
		return nil, nil
	}
	data, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the defaults file (%s): %w", how(explicit), err)
	}
	return Parse(path, data)
}

func how(explicit bool) string {
	if explicit {
		return "$" + EnvConfig
	}
	return "$" + envXDG + "/kubectl-tao/config.yaml"
}

// Parse reads a defaults file strictly: apiVersion and kind must be this package's, every key
// must be known, and every error names the file and line.
func Parse(path string, data []byte) (*File, error) {
	f := &File{Path: path}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return f, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, f.errorf(root, "expected a mapping with apiVersion: %s, kind: %s and submit:", APIVersion, Kind)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return nil, f.errorf(k, "%q given twice", k.Value)
		}
		seen[k.Value] = true
		switch k.Value {
		case "apiVersion":
			if v.Value != APIVersion {
				return nil, f.errorf(v, "apiVersion %q is not supported: use %s", v.Value, APIVersion)
			}
		case "kind":
			if v.Value != Kind {
				return nil, f.errorf(v, "kind %q: want %s", v.Value, Kind)
			}
		case "submit":
			s, err := f.parseSubmit(v)
			if err != nil {
				return nil, err
			}
			f.Submit = s
		default:
			return nil, f.errorf(k, "unknown key %q (known: apiVersion, kind, submit)", k.Value)
		}
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if !seen[k] {
			return nil, f.errorf(root, "missing %s (want apiVersion: %s, kind: %s)", k, APIVersion, Kind)
		}
	}
	return f, nil
}

func (f *File) parseSubmit(n *yaml.Node) ([]Setting, error) {
	if n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, f.errorf(n, "submit: expected a mapping of flag names to values, e.g. image: nvcr.io/...")
	}
	var out []Setting
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := strings.TrimPrefix(k.Value, "--")
		if seen[name] {
			return nil, f.errorf(k, "submit: %q given twice", name)
		}
		seen[name] = true
		s := Setting{Flag: name, Line: k.Line}
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
			s.Values = []string{v.Value}
		case v.Kind == yaml.SequenceNode:
			s.List = true
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
					return nil, f.errorf(item, "submit: %s: each item must be a value as on the command line (KEY=VALUE, NAME, ...)", name)
				}
				s.Values = append(s.Values, item.Value)
			}
		case v.Kind == yaml.ScalarNode:
			return nil, f.errorf(k, "submit: %s has no value", name)
		default:
			return nil, f.errorf(v, "submit: %s: expected a value or a list of values, written as on the command line", name)
		}
		out = append(out, s)
	}
	return out, nil
}

func (f *File) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", f.Path, n.Line, fmt.Sprintf(format, args...))
}

// repeatable reports whether a flag takes several values (StringArray, StringSlice, ...).
func repeatable(fl *pflag.Flag) bool {
	t := fl.Value.Type()
	return strings.HasSuffix(t, "Array") || strings.HasSuffix(t, "Slice")
}

// Check validates the settings against the flags of the command they default: each names a
// flag that may be defaulted, lists only go to repeatable flags, and numbers, booleans and
// durations parse. Values that only the command can judge (quantities, tolerations) are judged
// by it, as if typed.
func Check(f *File, flags *pflag.FlagSet) error {
	for _, s := range f.Submit {
		fl := flags.Lookup(s.Flag)
		if fl == nil || fl.Hidden || slices.Contains(NotDefaultable, s.Flag) {
			return fmt.Errorf("%s:%d: submit: %q is not a flag a defaults file can set (%s)", f.Path, s.Line, s.Flag, known(flags))
		}
		if s.List && !repeatable(fl) {
			return fmt.Errorf("%s:%d: submit: --%s takes one value, not a list", f.Path, s.Line, s.Flag)
		}
		for _, v := range s.Values {
			if err := checkValue(fl, v); err != nil {
				return fmt.Errorf("%s:%d: submit: --%s %q: %w", f.Path, s.Line, s.Flag, v, err)
			}
		}
	}
	return nil
}

// checkValue parses v as the flag would: pflag's own types as pflag does (integers in base 0:
// 0x10, 0o7, 1_000; a leading 0 is octal, so 08 is refused; each type's own size), and a
// flag of the plugin's own type (--nodes N|MIN:MAX) by setting it, which judges it. fl is of
// the flag set Check was given, made for the check.
func checkValue(fl *pflag.Flag, v string) error {
	var err error
	typ := fl.Value.Type()
	switch strings.TrimSuffix(strings.TrimSuffix(typ, "Slice"), "Array") {
	case "int", "int64":
		_, err = strconv.ParseInt(v, 0, 64)
	case "int32":
		_, err = strconv.ParseInt(v, 0, 32)
	case "uint", "uint64":
		_, err = strconv.ParseUint(v, 0, 64)
	case "uint32":
		_, err = strconv.ParseUint(v, 0, 32)
	case "bool":
		_, err = strconv.ParseBool(v)
	case "duration":
		_, err = time.ParseDuration(v)
	case "float32":
		_, err = strconv.ParseFloat(v, 32)
	case "float64":
		_, err = strconv.ParseFloat(v, 64)
	case "string", "":
	default:
		if err := fl.Value.Set(v); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("not a valid %s", typ)
	}
	return nil
}

// known lists the flags a defaults file may set, for the error on an unknown key.
func known(flags *pflag.FlagSet) string {
	var names []string
	flags.VisitAll(func(fl *pflag.Flag) {
		if !fl.Hidden && !slices.Contains(NotDefaultable, fl.Name) {
			names = append(names, fl.Name)
		}
	})
	return "known: " + strings.Join(names, ", ")
}

// Merge keeps the settings the command line does not override: a flag the user gave wins over
// the file, and for a repeatable flag the command line's values replace the file's list.
func Merge(settings []Setting, changed func(flag string) bool) []Setting {
	var out []Setting
	for _, s := range settings {
		if !changed(s.Flag) {
			out = append(out, s)
		}
	}
	return out
}

// Apply checks f against flags and sets every setting the command line did not override, as
// if it had been typed (so the command treats it exactly like the flag). It returns the flags
// it set, in file order.
func Apply(f *File, flags *pflag.FlagSet) ([]string, error) {
	if f == nil {
		return nil, nil
	}
	if err := Check(f, flags); err != nil {
		return nil, err
	}
	return set(f, f.Submit, flags)
}

// ApplyShared sets, on another command that takes some of submit's flags (preflight), the
// settings whose flag that command has and its command line did not override, so that it
// judges the job submit would make. Settings for flags it does not have are left out; check f
// against submit's flags first (Check), as Apply does.
func ApplyShared(f *File, flags *pflag.FlagSet) ([]string, error) {
	if f == nil {
		return nil, nil
	}
	var shared []Setting
	for _, s := range f.Submit {
		if flags.Lookup(s.Flag) != nil {
			shared = append(shared, s)
		}
	}
	return set(f, shared, flags)
}

func set(f *File, settings []Setting, flags *pflag.FlagSet) ([]string, error) {
	var applied []string
	for _, s := range Merge(settings, func(name string) bool { return flags.Changed(name) }) {
		for _, v := range s.Values {
			if err := flags.Set(s.Flag, v); err != nil {
				return nil, fmt.Errorf("%s:%d: submit: --%s %q: %w", f.Path, s.Line, s.Flag, v, err)
			}
		}
		applied = append(applied, s.Flag)
	}
	return applied, nil
}

// Render writes f back as YAML in its own order, values as parsed: what `kubectl tao config
// view` prints.
func Render(f *File) ([]byte, error) {
	// No tag: the encoder writes 8 and true plain and quotes only what YAML would misread.
	// An empty value is quoted: written plain it would read back as null, which Parse refuses.
	str := func(v string) *yaml.Node {
		n := &yaml.Node{Kind: yaml.ScalarNode, Value: v}
		if v == "" {
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	}
	submit := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range f.Submit {
		var v *yaml.Node
		if s.List {
			v = &yaml.Node{Kind: yaml.SequenceNode}
			for _, item := range s.Values {
				v.Content = append(v.Content, str(item))
			}
		} else {
			v = str(s.Values[0])
		}
		submit.Content = append(submit.Content, str(s.Flag), v)
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("apiVersion"), str(APIVersion), str("kind"), str(Kind), str("submit"), submit,
	}}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
