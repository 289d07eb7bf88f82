package localcluster

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// DefaultKubernetesVersion is the release the cluster runs unless told otherwise: the newest
// one supported, so the upper end of the range below follows it.
const DefaultKubernetesVersion = "v1.37.2"

// MinKubernetesMinor is the oldest minor the launcher builds and starts: the README's floor.
const MinKubernetesMinor = 28

// RealNodeMinKubernetesMinor is the oldest minor the real node runs: containerd v2's release
// notes name Kubernetes 1.32 and newer, and the node keeps one containerd and one config format.
const RealNodeMinKubernetesMinor = 32

// KubeVersion is a Kubernetes release v1.MINOR.PATCH.
type KubeVersion struct {
	Minor, Patch int
}

var kubeVersionRE = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)$`)

// parseKubeVersion reads vX.Y.Z without a range check.
func parseKubeVersion(s string) (KubeVersion, error) {
	m := kubeVersionRE.FindStringSubmatch(s)
	if m == nil {
		return KubeVersion{}, fmt.Errorf("Kubernetes version %q is not a release vMAJOR.MINOR.PATCH (for example %s)", s, DefaultKubernetesVersion)
	}
	major, _ := strconv.Atoi(m[1])
	minor, errMinor := strconv.Atoi(m[2])
	patch, errPatch := strconv.Atoi(m[3])
	if major != 1 || errMinor != nil || errPatch != nil {
		return KubeVersion{}, fmt.Errorf("Kubernetes version %q is not a 1.x release (for example %s)", s, DefaultKubernetesVersion)
	}
	return KubeVersion{Minor: minor, Patch: patch}, nil
}

// DefaultKubeVersion is DefaultKubernetesVersion parsed.
func DefaultKubeVersion() KubeVersion {
	v, err := parseKubeVersion(DefaultKubernetesVersion)
	if err != nil {
		panic(err)
	}
	return v
}

// ParseKubernetesVersion reads a --kubernetes-version: any patch release of a minor from
// MinKubernetesMinor to the default's. An empty string is the default.
func ParseKubernetesVersion(s string) (KubeVersion, error) {
	if s == "" {
		return DefaultKubeVersion(), nil
	}
	v, err := parseKubeVersion(s)
	if err != nil {
		return KubeVersion{}, err
	}
	if newest := DefaultKubeVersion().Minor; v.Minor < MinKubernetesMinor || v.Minor > newest {
		return KubeVersion{}, fmt.Errorf("Kubernetes version %s: minor %d is outside the supported range 1.%d to 1.%d", s, v.Minor, MinKubernetesMinor, newest)
	}
	return v, nil
}

func (v KubeVersion) String() string { return fmt.Sprintf("v1.%d.%d", v.Minor, v.Patch) }

// IsZero reports an unset version (a state file written before versions were recorded).
func (v KubeVersion) IsZero() bool { return v == KubeVersion{} }

// Staging is the version of the staging modules (k8s.io/api, k8s.io/client-go, ...) released
// with v.
func (v KubeVersion) Staging() string { return fmt.Sprintf("v0.%d.%d", v.Minor, v.Patch) }

// LDFlags make the servers report v instead of v0.0.0, which kubectl's skew warning and
// anything reading /version would otherwise trip over.
func (v KubeVersion) LDFlags() string {
	var b strings.Builder
	b.WriteString("-s -w")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%d", pkg, v, pkg, pkg, v.Minor)
	}
	return b.String()
}

// KubeWrapperTools is the tools.go of every Kubernetes wrapper module.
const KubeWrapperTools = `//go:build tools

// Package tools pins the Kubernetes commands this module builds: the control plane, the real
// node's kubelet and kubectl (for a machine without one), in one module so they share one build
// cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
`

// kubeWrapperModulePrefix is the module path of the wrappers, completed by kubernetes-<version>.
const kubeWrapperModulePrefix = "github.com/kubectl-tao/kubectl-tao/test/localcluster/build/"

var (
	stagingReplaceRE = regexp.MustCompile(`^\s*(?:replace\s+)?(k8s\.io/[A-Za-z0-9._-]+)\s+=>\s+\./staging/src/`)
	goDirectiveRE    = regexp.MustCompile(`^go\s+(\d+\.\d+(?:\.\d+)?)\s*$`)
	toolchainRE      = regexp.MustCompile(`^toolchain\s+(go\d+\.\d+(?:\.\d+)?)\s*$`)
)

// StagingModules lists the modules a release's go.mod replaces by its staging directories,
// sorted.
func StagingModules(releaseGoMod []byte) []string {
	var mods []string
	for _, line := range strings.Split(string(releaseGoMod), "\n") {
		if m := stagingReplaceRE.FindStringSubmatch(line); m != nil {
			mods = append(mods, m[1])
		}
	}
	sort.Strings(mods)
	return mods
}

// goDirective returns the go and toolchain lines' versions of a go.mod ("" where absent).
func goDirective(goMod []byte) (goVersion, toolchain string) {
	for _, line := range strings.Split(string(goMod), "\n") {
		line = strings.TrimSpace(line)
		if m := goDirectiveRE.FindStringSubmatch(line); m != nil {
			goVersion = m[1]
		}
		if m := toolchainRE.FindStringSubmatch(line); m != nil {
			toolchain = m[1]
		}
	}
	return goVersion, toolchain
}

// RenderKubeWrapper renders the go.mod of the wrapper module for release v from the release's
// own go.mod: the release required, and each of its `k8s.io/X => ./staging/src/k8s.io/X`
// replacements turned into `k8s.io/X => k8s.io/X v0.MINOR.PATCH` (the staging module's
// release). staging overrides that version for the modules the proxy does not serve at it.
// `go mod tidy` completes the result.
func RenderKubeWrapper(v KubeVersion, releaseGoMod []byte, staging map[string]string) (string, error) {
	mods := StagingModules(releaseGoMod)
	if len(mods) == 0 {
		return "", fmt.Errorf("the go.mod of k8s.io/kubernetes %s replaces no staging module; is it a release's go.mod?", v)
	}
	goVersion, _ := goDirective(releaseGoMod)
	if goVersion == "" {
		return "", fmt.Errorf("the go.mod of k8s.io/kubernetes %s has no go directive", v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Module kube wraps k8s.io/kubernetes %s so its commands can be built from the Go module\n", v)
	b.WriteString("// proxy. Generated by `localcluster wrapper`; kept apart from the plugin's go.mod on purpose.\n")
	fmt.Fprintf(&b, "module %skubernetes-%s\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", kubeWrapperModulePrefix, v, goVersion, v)
	for _, m := range mods {
		ver := v.Staging()
		if o, ok := staging[m]; ok {
			ver = o
		}
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, ver)
	}
	b.WriteString(")\n")
	return b.String(), nil
}

var unservedRE = regexp.MustCompile(`(k8s\.io/[A-Za-z0-9._-]+)@(v0\.\d+\.\d+): reading \S+: (?:403|404|410)\b`)

// unservedStaging returns the staging modules `go mod tidy`'s output says the proxy does not
// serve at the version asked for, sorted.
func unservedStaging(output string) []string {
	seen := map[string]bool{}
	var mods []string
	for _, m := range unservedRE.FindAllStringSubmatch(output, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			mods = append(mods, m[1])
		}
	}
	sort.Strings(mods)
	return mods
}

// sumDBUnreachable reports whether a go command failed on reaching the checksum database
// rather than on the module proxy. A checksum mismatch is never taken for it.
func sumDBUnreachable(output string) bool {
	if strings.Contains(output, "SECURITY ERROR") || strings.Contains(output, "checksum mismatch") {
		return false
	}
	return strings.Contains(output, "sum.golang.org") || strings.Contains(output, "checksum database")
}

// nearestPatch picks, among a module's served versions, the release of the same minor closest
// to want: the newest at or below it, else the oldest above. Prereleases never qualify.
func nearestPatch(want string, served []string) (string, bool) {
	w, err := parseStaging(want)
	if err != nil {
		return "", false
	}
	below, above := -1, -1
	for _, s := range served {
		v, err := parseStaging(s)
		if err != nil || v.Minor != w.Minor {
			continue
		}
		if v.Patch <= w.Patch && v.Patch > below {
			below = v.Patch
		}
		if v.Patch > w.Patch && (above < 0 || v.Patch < above) {
			above = v.Patch
		}
	}
	switch {
	case below >= 0:
		return fmt.Sprintf("v0.%d.%d", w.Minor, below), true
	case above >= 0:
		return fmt.Sprintf("v0.%d.%d", w.Minor, above), true
	}
	return "", false
}

var stagingVersionRE = regexp.MustCompile(`^v0\.(\d+)\.(\d+)$`)

func parseStaging(s string) (KubeVersion, error) {
	m := stagingVersionRE.FindStringSubmatch(s)
	if m == nil {
		return KubeVersion{}, fmt.Errorf("%q is not a staging release v0.Y.Z", s)
	}
	minor, _ := strconv.Atoi(m[1])
	patch, _ := strconv.Atoi(m[2])
	return KubeVersion{Minor: minor, Patch: patch}, nil
}

// ReleaseGo names the Go release to build a Kubernetes release with when the machine's Go
// cannot: its go.mod's toolchain line, else the newest patch of its go directive's minor among
// the toolchains the proxy serves (golang.org/toolchain versions v0.0.1-goX.Y.Z.GOOS-GOARCH).
func ReleaseGo(releaseGoMod []byte, toolchains []string, goos, goarch string) (string, error) {
	goVersion, toolchain := goDirective(releaseGoMod)
	if toolchain != "" {
		return toolchain, nil
	}
	parts := strings.Split(goVersion, ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("the release's go.mod names no Go version")
	}
	prefix := "v0.0.1-go" + parts[0] + "." + parts[1] + "."
	suffix := "." + goos + "-" + goarch
	best := -1
	for _, t := range toolchains {
		if !strings.HasPrefix(t, prefix) || !strings.HasSuffix(t, suffix) {
			continue
		}
		p, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(t, prefix), suffix))
		if err == nil && p > best {
			best = p
		}
	}
	if best < 0 {
		return "", fmt.Errorf("the module proxy serves no Go %s.%s toolchain for %s/%s", parts[0], parts[1], goos, goarch)
	}
	return fmt.Sprintf("go%s.%s.%d", parts[0], parts[1], best), nil
}
