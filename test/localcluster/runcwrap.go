package localcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// runc-noseccomp: the real node's runc is built without seccomp (this host has no libseccomp
// headers), but the kubelet asks for the RuntimeDefault profile for every sandbox whatever the
// pod says, and runc without seccomp support refuses any profile. containerd runs the launcher
// under the name runc-noseccomp instead of runc; on create and run it deletes linux.seccomp
// from the bundle's config.json, then execs the real runc (the "runc" next to it) with the same
// arguments. Consequence: no seccomp filtering on the real node, which tests must not assert.

// runcGlobalValueFlags are runc's global flags that take a value as the next argument.
var runcGlobalValueFlags = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

// RuncBundle returns runc's subcommand and, for create and run, the bundle directory ("" for
// the working directory).
func RuncBundle(args []string) (sub, bundle string) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if runcGlobalValueFlags[a] {
			i++
			continue
		}
		if !strings.HasPrefix(a, "-") {
			sub = a
			break
		}
	}
	if sub != "create" && sub != "run" {
		return sub, ""
	}
	for j := i + 1; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--bundle" || a == "-b":
			if j+1 < len(args) {
				return sub, args[j+1]
			}
		case strings.HasPrefix(a, "--bundle="):
			return sub, strings.TrimPrefix(a, "--bundle=")
		case strings.HasPrefix(a, "-b="):
			return sub, strings.TrimPrefix(a, "-b=")
		}
	}
	return sub, ""
}

// DropSeccomp removes linux.seccomp from an OCI runtime config. Numbers are kept as written
// (json.Number), so 64-bit limits survive exactly. It reports whether anything changed.
func DropSeccomp(config []byte) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(config))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return nil, false, fmt.Errorf("parse config.json: %w", err)
	}
	linux, ok := spec["linux"].(map[string]any)
	if !ok {
		return config, false, nil
	}
	if _, ok := linux["seccomp"]; !ok {
		return config, false, nil
	}
	delete(linux, "seccomp")
	out, err := json.Marshal(spec)
	if err != nil {
		return nil, false, fmt.Errorf("encode config.json: %w", err)
	}
	return out, true, nil
}

// RunRuncWrapper is main for the runc-noseccomp name. It only returns on error.
func RunRuncWrapper(argv0 string, args []string) error {
	if sub, bundle := RuncBundle(args); sub == "create" || sub == "run" {
		path := filepath.Join(bundle, "config.json")
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("runc-noseccomp: %w", err)
		}
		out, changed, err := DropSeccomp(data)
		if err != nil {
			return fmt.Errorf("runc-noseccomp: %s: %w", path, err)
		}
		if changed {
			if err := os.WriteFile(path, out, 0o600); err != nil {
				return fmt.Errorf("runc-noseccomp: %w", err)
			}
		}
	}
	// argv0 is the path containerd ran, in the node's bin directory, where "runc" is the real one.
	runc := filepath.Join(filepath.Dir(argv0), "runc")
	return syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
}
