package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// KubeWrapperDir is the committed wrapper module of release v, relative to the repository root.
func KubeWrapperDir(v KubeVersion) string {
	return filepath.Join("test", "localcluster", "build", "kubernetes-"+v.String())
}

// generatedWrapperDir is where a release without a committed wrapper gets one, in the cache.
func generatedWrapperDir(cacheDir string, v KubeVersion) string {
	return filepath.Join(cacheDir, "modules", "kubernetes-"+v.String())
}

// wrapperGoEnv is the environment of the go commands that resolve and build a wrapper: its
// own module only (no go.work, no plugin GOFLAGS), the machine's Go.
func wrapperGoEnv(extra ...string) []string {
	return append(append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS="), extra...)
}

// runGo runs a go command in dir and returns its combined output.
func runGo(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// releaseGoMod fetches the go.mod of k8s.io/kubernetes at v from the module proxy.
func releaseGoMod(ctx context.Context, dir string, v KubeVersion, env []string) ([]byte, string, error) {
	out, err := runGo(ctx, dir, env, "mod", "download", "-json", "k8s.io/kubernetes@"+v.String())
	var info struct{ GoMod, Error string }
	if jerr := json.Unmarshal([]byte(out), &info); jerr == nil && info.Error != "" {
		return nil, info.Error, fmt.Errorf("download k8s.io/kubernetes %s: %s", v, info.Error)
	}
	if err != nil || info.GoMod == "" {
		return nil, out, fmt.Errorf("download k8s.io/kubernetes %s: %v: %s", v, err, strings.TrimSpace(out))
	}
	data, err := os.ReadFile(info.GoMod)
	return data, "", err
}

// EnsureKubeWrapper returns the directory of release v's wrapper module: the committed one
// under test/localcluster/build where there is one, else one generated into the cache
// (GenerateKubeWrapper) the first time.
func EnsureKubeWrapper(ctx context.Context, v KubeVersion, cacheDir, sourceDir string, progress io.Writer) (string, error) {
	if sourceDir != "" {
		dir := filepath.Join(sourceDir, KubeWrapperDir(v))
		if _, err := os.Stat(filepath.Join(dir, "go.sum")); err == nil {
			return dir, nil
		}
	}
	dir := generatedWrapperDir(cacheDir, v)
	if _, err := os.Stat(filepath.Join(dir, "go.sum")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".kubernetes-"+v.String()+"-*")
	if err != nil {
		return "", fmt.Errorf("create a directory for the %s wrapper module: %w", v, err)
	}
	defer os.RemoveAll(tmp)
	if err := GenerateKubeWrapper(ctx, v, tmp, progress); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("move the %s wrapper module into the cache: %w", v, err)
	}
	return dir, nil
}

// GenerateKubeWrapper writes release v's wrapper module (go.mod, go.sum, tools.go) into dir:
// RenderKubeWrapper from the release's go.mod, then `go mod tidy`. A staging module the proxy
// does not serve at v0.MINOR.PATCH takes the nearest patch of the same minor it serves; where
// the checksum database cannot be reached, the sums come from the proxy unverified. Each is
// said in one progress line.
func GenerateKubeWrapper(ctx context.Context, v KubeVersion, dir string, progress io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fmt.Fprintf(progress, "localcluster: resolving the wrapper module of Kubernetes %s from the module proxy into %s\n", v, dir)
	// The release's go.mod is fetched outside any module: dir may lie inside the plugin's.
	env := wrapperGoEnv()
	mod, out, err := releaseGoMod(ctx, os.TempDir(), v, env)
	if err != nil && sumDBUnreachable(out) {
		fmt.Fprintln(progress, "localcluster: checksum database unreachable: sums from the proxy, unverified")
		env = wrapperGoEnv("GOSUMDB=off")
		mod, _, err = releaseGoMod(ctx, os.TempDir(), v, env)
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tools.go"), []byte(KubeWrapperTools), 0o644); err != nil {
		return fmt.Errorf("write tools.go: %w", err)
	}
	staging := map[string]string{}
	sumdbOff := strings.Contains(strings.Join(env, "\n"), "GOSUMDB=off")
	for attempt := 0; ; attempt++ {
		gomod, err := RenderKubeWrapper(v, mod, staging)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			return fmt.Errorf("write go.mod: %w", err)
		}
		out, err := runGo(ctx, dir, env, "mod", "tidy")
		if err == nil {
			return nil
		}
		if !sumdbOff && sumDBUnreachable(out) {
			fmt.Fprintln(progress, "localcluster: checksum database unreachable: sums from the proxy, unverified")
			env, sumdbOff = wrapperGoEnv("GOSUMDB=off"), true
			continue
		}
		missing := unservedStaging(out)
		var subst []string
		for _, m := range missing {
			if _, done := staging[m]; done {
				continue
			}
			// Outside the half-resolved wrapper, which go list would refuse to load.
			vout, verr := runGo(ctx, os.TempDir(), env, "list", "-m", "-versions", m)
			if verr != nil {
				return fmt.Errorf("list the versions of %s: %v: %s", m, verr, strings.TrimSpace(vout))
			}
			near, ok := nearestPatch(v.Staging(), strings.Fields(vout))
			if !ok {
				// The proxy's list omits old versions it still serves when asked by version.
				near, ok = probeOlderPatch(ctx, env, m, v)
			}
			if !ok {
				return fmt.Errorf("the module proxy serves no %s release of minor 1.%d", m, v.Minor)
			}
			staging[m] = near
			subst = append(subst, m+" "+near)
		}
		if len(subst) == 0 || attempt > 5 {
			return fmt.Errorf("go mod tidy for the Kubernetes %s wrapper module: %v\n%s", v, err, tail(out, 20))
		}
		fmt.Fprintf(progress, "localcluster: the module proxy lacks %s of %d staging modules; using the nearest patch: %s\n",
			v.Staging(), len(subst), strings.Join(subst, ", "))
	}
}

// probeOlderPatch asks the proxy for staging module m at the patches of v's minor below v's,
// newest first, and returns the first it serves.
func probeOlderPatch(ctx context.Context, env []string, m string, v KubeVersion) (string, bool) {
	for p := v.Patch - 1; p >= 0; p-- {
		ver := KubeVersion{Minor: v.Minor, Patch: p}.Staging()
		if _, err := runGo(ctx, os.TempDir(), env, "mod", "download", "-json", m+"@"+ver); err == nil {
			return ver, true
		}
	}
	return "", false
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// toolchainFile records, in a release's cache directory, the Go release that built it where
// the machine's could not, so its other binaries go straight to it.
func toolchainFile(b Binary, cacheDir string) string {
	return filepath.Join(filepath.Dir(b.Path(cacheDir)), ".go-toolchain")
}

// releaseToolchain names the Go to retry a release's build with (ReleaseGo), from the
// release's go.mod and the toolchains the proxy lists.
func releaseToolchain(ctx context.Context, dir string, v KubeVersion) (string, error) {
	mod, _, err := releaseGoMod(ctx, dir, v, wrapperGoEnv())
	if err != nil {
		if mod, _, err = releaseGoMod(ctx, dir, v, wrapperGoEnv("GOSUMDB=off")); err != nil {
			return "", err
		}
	}
	if _, tc := goDirective(mod); tc != "" {
		return tc, nil
	}
	out, err := runGo(ctx, dir, wrapperGoEnv(), "list", "-m", "-versions", "golang.org/toolchain")
	if err != nil {
		return "", fmt.Errorf("list the Go toolchains of the module proxy: %v: %s", err, strings.TrimSpace(out))
	}
	return ReleaseGo(mod, strings.Fields(out), runtime.GOOS, runtime.GOARCH)
}

// localGoVersion is the machine's Go (GOTOOLCHAIN=local), for progress lines.
func localGoVersion(ctx context.Context) string {
	out, err := runGo(ctx, "", wrapperGoEnv(), "env", "GOVERSION")
	if err != nil {
		return "the machine's Go"
	}
	return strings.TrimSpace(out)
}

// ticker prints a still-building line every 30 s until stop is closed.
func ticker(progress io.Writer, name string, start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(progress, "localcluster: still building %s (%s)\n", name, time.Since(start).Round(time.Second))
		}
	}
}
