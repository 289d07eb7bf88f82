// Package credentials is the one path by which a secret leaves the submitting shell: values are
// read from the local environment (never from argv), by name, for create-pull-secret, submit's
// S3 staging and submit --secret-env; and the one rule saying which variable names hold
// credentials, so that --env refuses them. Pure: the environment is a getenv function.
package credentials

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// Known are variables that always hold a credential: TAO containers' own (NGC, Hugging Face,
// Weights & Biases, S3) and the common cloud and forge tokens.
var Known = []string{
	"NGC_KEY", "NGC_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY",
	"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ACCESS_KEY", "SECRET_KEY", "GITHUB_TOKEN",
}

// suffixes make a name look like a credential (HF_TOKEN, DB_PASSWORD, OPENAI_API_KEY, ...).
var suffixes = []string{"_TOKEN", "_SECRET", "_SECRET_KEY", "_PASSWORD", "_API_KEY"}

// IsKnown reports whether name is one of Known. The comparison ignores case: a shell's
// hf_token is the same key.
func IsKnown(name string) bool {
	return slices.Contains(Known, strings.ToUpper(name))
}

// LooksSecret reports whether a variable of this name would hold a credential: a Known one, or
// one ending in a credential suffix.
func LooksSecret(name string) bool {
	if IsKnown(name) {
		return true
	}
	up := strings.ToUpper(name)
	for _, s := range suffixes {
		if strings.HasSuffix(up, s) {
			return true
		}
	}
	return false
}

// shellName is a variable name a POSIX shell can export. Stricter than what a container accepts
// (which allows "-" and "."), so that a value typed where a name belongs (nvapi-...) is refused.
var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Ref is one --secret-env: the container's variable Name, read from the local variable Local.
type Ref struct {
	Name, Local string
}

// ParseRefs reads --secret-env values, NAME or NAME=LOCAL_NAME, in order. Both must be variable
// names. A value that is not one is refused without being quoted: it may be the secret itself,
// typed where its name belongs.
func ParseRefs(flag string, values []string) ([]Ref, error) {
	var out []Ref
	seen := map[string]bool{}
	for i, v := range values {
		name, local, hasLocal := strings.Cut(v, "=")
		if !hasLocal {
			local = name
		}
		switch {
		case !shellName.MatchString(name):
			return nil, fmt.Errorf("--%s (value %d, not shown): expected NAME or NAME=LOCAL_NAME, variable names (letters, digits, _): "+
				"the value is read from this shell's environment, never given on the command line", flag, i+1)
		case !shellName.MatchString(local):
			return nil, fmt.Errorf("--%s %s=... (not shown): LOCAL_NAME must be the name of a variable in this shell (letters, digits, _), "+
				"never its value: export it and pass --%s %s=THAT_NAME", flag, name, flag, name)
		case seen[name]:
			return nil, fmt.Errorf("--%s: %s is given more than once", flag, name)
		}
		seen[name] = true
		out = append(out, Ref{Name: name, Local: local})
	}
	return out, nil
}

// FromEnv reads the named variables from the local environment; unset and empty ones are left
// out. Every secret kubectl-tao takes from the shell is read here.
func FromEnv(getenv func(string) string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if v := getenv(n); v != "" {
			out[n] = v
		}
	}
	return out
}

// Value is one resolved --secret-env: the container's variable and its value.
type Value struct {
	Name, Value string
}

// Resolve reads every ref's local variable, in order. A variable unset or empty here is an
// error naming it (all of them at once): a job that would start without its credential fails
// late and obscurely.
func Resolve(flag string, getenv func(string) string, refs []Ref) ([]Value, error) {
	locals := make([]string, len(refs))
	for i, r := range refs {
		locals[i] = r.Local
	}
	env := FromEnv(getenv, locals...)
	var out []Value
	var missing []string
	for _, r := range refs {
		v, ok := env[r.Local]
		if !ok {
			missing = append(missing, "$"+r.Local)
			continue
		}
		out = append(out, Value{Name: r.Name, Value: v})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("--%s: %s %s unset or empty in this shell: export %s first (nothing was created)",
			flag, strings.Join(missing, ", "), plural.Word(len(missing), "is", "are"), plural.Word(len(missing), "it", "them"))
	}
	return out, nil
}
