package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKubernetesVersion(t *testing.T) {
	newest := DefaultKubeVersion().Minor
	for _, tc := range []struct {
		in      string
		want    KubeVersion
		wantErr string
	}{
		{in: "", want: DefaultKubeVersion()},
		{in: "v1.31.14", want: KubeVersion{Minor: 31, Patch: 14}},
		{in: "v1.28.0", want: KubeVersion{Minor: 28}},
		{in: DefaultKubernetesVersion, want: DefaultKubeVersion()},
		{in: "1.31.14", wantErr: "not a release vMAJOR.MINOR.PATCH"},
		{in: "v1.31", wantErr: "not a release vMAJOR.MINOR.PATCH"},
		{in: "v1.37.0-rc.1", wantErr: "not a release vMAJOR.MINOR.PATCH"},
		{in: "latest", wantErr: "not a release vMAJOR.MINOR.PATCH"},
		{in: "v2.1.0", wantErr: "not a 1.x release"},
		{in: "v1.27.16", wantErr: "minor 27 is outside the supported range 1.28 to 1."},
		{in: "v1.99.0", wantErr: "minor 99 is outside the supported range"},
	} {
		got, err := ParseKubernetesVersion(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if newest < MinKubernetesMinor {
		t.Errorf("the default's minor %d is below the floor %d", newest, MinKubernetesMinor)
	}
}

func TestKubeVersionStrings(t *testing.T) {
	v := KubeVersion{Minor: 31, Patch: 14}
	if v.String() != "v1.31.14" || v.Staging() != "v0.31.14" {
		t.Errorf("String %s, Staging %s", v, v.Staging())
	}
	ld := v.LDFlags()
	for _, want := range []string{
		"-s -w ",
		"-X k8s.io/component-base/version.gitVersion=v1.31.14",
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=31",
		"-X k8s.io/client-go/pkg/version.gitVersion=v1.31.14",
		"-X k8s.io/client-go/pkg/version.gitMinor=31",
	} {
		if !strings.Contains(ld, want) {
			t.Errorf("ldflags %q lack %q", ld, want)
		}
	}
	if strings.Contains(ld, "37") {
		t.Errorf("ldflags of v1.31.14 name another minor: %q", ld)
	}
}

// The renderer works on a trimmed copy of a real release's go.mod.
func TestRenderKubeWrapper(t *testing.T) {
	release, err := os.ReadFile(filepath.Join("testdata", "kubernetes-v1.31.14.go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	v := KubeVersion{Minor: 31, Patch: 14}
	for _, tc := range []struct {
		name    string
		staging map[string]string
		want    []string
		notWant []string
	}{
		{
			name: "every staging module at the release's staging version",
			want: []string{
				"module github.com/kubectl-tao/kubectl-tao/test/localcluster/build/kubernetes-v1.31.14\n",
				"\ngo 1.22.0\n",
				"\nrequire k8s.io/kubernetes v1.31.14\n",
				"\tk8s.io/api => k8s.io/api v0.31.14\n",
				"\tk8s.io/apimachinery => k8s.io/apimachinery v0.31.14\n",
				"\tk8s.io/client-go => k8s.io/client-go v0.31.14\n",
				"\tk8s.io/component-base => k8s.io/component-base v0.31.14\n",
				"\tk8s.io/endpointslice => k8s.io/endpointslice v0.31.14\n",
				"\tk8s.io/kube-scheduler => k8s.io/kube-scheduler v0.31.14\n",
			},
			notWant: []string{"./staging", "bitbucket.org", "v0.0.0"},
		},
		{
			name:    "a module the proxy lacks at that patch takes the version given",
			staging: map[string]string{"k8s.io/kube-scheduler": "v0.31.13"},
			want:    []string{"\tk8s.io/kube-scheduler => k8s.io/kube-scheduler v0.31.13\n", "\tk8s.io/api => k8s.io/api v0.31.14\n"},
			notWant: []string{"kube-scheduler v0.31.14"},
		},
	} {
		got, err := RenderKubeWrapper(v, release, tc.staging)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: rendered go.mod lacks %q:\n%s", tc.name, w, got)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(got, w) {
				t.Errorf("%s: rendered go.mod has %q:\n%s", tc.name, w, got)
			}
		}
		if n := strings.Count(got, " => "); n != 6 {
			t.Errorf("%s: %d replacements, want the release's 6", tc.name, n)
		}
	}
	if _, err := RenderKubeWrapper(v, []byte("module k8s.io/kubernetes\n\ngo 1.22.0\n"), nil); err == nil {
		t.Error("a go.mod without staging replacements rendered")
	}
	if _, err := RenderKubeWrapper(v, []byte("module x\nreplace k8s.io/api => ./staging/src/k8s.io/api\n"), nil); err == nil {
		t.Error("a go.mod without a go directive rendered")
	}
	// A single-line replace counts too.
	if got := StagingModules([]byte("replace k8s.io/api => ./staging/src/k8s.io/api\n")); len(got) != 1 || got[0] != "k8s.io/api" {
		t.Errorf("single-line replace: %v", got)
	}
}

// Every committed wrapper is one release's: its own version required, its staging modules at
// that minor, the common tools.go.
func TestCommittedKubeWrappers(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("build", "kubernetes-v*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no committed wrapper modules: %v", err)
	}
	haveDefault := false
	for _, dir := range dirs {
		v, err := parseKubeVersion(strings.TrimPrefix(filepath.Base(dir), "kubernetes-"))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		haveDefault = haveDefault || v == DefaultKubeVersion()
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(mod), "require k8s.io/kubernetes "+v.String()+"\n") {
			t.Errorf("%s/go.mod does not require k8s.io/kubernetes %s", dir, v)
		}
		for _, line := range strings.Split(string(mod), "\n") {
			if strings.Contains(line, " => k8s.io/") && !strings.Contains(line, fmt.Sprintf(" v0.%d.", v.Minor)) {
				t.Errorf("%s/go.mod: %q is not of minor 1.%d", dir, strings.TrimSpace(line), v.Minor)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "go.sum")); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		tools, err := os.ReadFile(filepath.Join(dir, "tools.go"))
		if err != nil || string(tools) != KubeWrapperTools {
			t.Errorf("%s/tools.go differs from KubeWrapperTools (%v)", dir, err)
		}
	}
	if !haveDefault {
		t.Errorf("no committed wrapper for the default %s", DefaultKubernetesVersion)
	}
}

func TestUnservedStaging(t *testing.T) {
	out := `go: finding module for package k8s.io/kube-scheduler/extender/v1
	k8s.io/kube-scheduler/extender/v1: k8s.io/kube-scheduler@v0.31.14: reading https://proxy.golang.org/k8s.io/kube-scheduler/@v/v0.31.14.zip: 403 Forbidden
	server response: This module version is not available.
	k8s.io/kube-scheduler/config/v1: k8s.io/kube-scheduler@v0.31.14: reading https://proxy.golang.org/k8s.io/kube-scheduler/@v/v0.31.14.zip: 403 Forbidden
	k8s.io/endpointslice: k8s.io/endpointslice@v0.31.14: reading https://proxy.golang.org/k8s.io/endpointslice/@v/v0.31.14.mod: 404 Not Found
	github.com/foo/bar: github.com/foo/bar@v1.0.0: reading https://proxy.golang.org/github.com/foo/bar/@v/v1.0.0.zip: 403 Forbidden
`
	got := unservedStaging(out)
	if strings.Join(got, ",") != "k8s.io/endpointslice,k8s.io/kube-scheduler" {
		t.Errorf("unserved %v", got)
	}
	if unservedStaging("go: downloading k8s.io/api v0.31.14\n") != nil {
		t.Error("a clean output named modules")
	}
}

func TestSumDBUnreachable(t *testing.T) {
	for out, want := range map[string]bool{
		`verifying k8s.io/api@v0.31.14: k8s.io/api@v0.31.14: Get "https://sum.golang.org/lookup/k8s.io/api@v0.31.14": dial tcp: lookup sum.golang.org: no such host`: true,
		"verifying k8s.io/api@v0.31.14: checksum mismatch\n\tdownloaded: h1:x=\n\tsum.golang.org: h1:y=\n\nSECURITY ERROR":                                           false,
		"k8s.io/api@v0.31.14: reading https://proxy.golang.org/...: 403 Forbidden":                                                                                   false,
	} {
		if got := sumDBUnreachable(out); got != want {
			t.Errorf("sumDBUnreachable(%q) = %v", out, got)
		}
	}
}

func TestNearestPatch(t *testing.T) {
	served := []string{"v0.31.8", "v0.31.9", "v0.31.11", "v0.31.13", "v0.33.7", "v0.33.13", "v0.37.0-rc.1", "v0.37.2"}
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{"v0.31.14", "v0.31.13", true}, // newest below
		{"v0.31.10", "v0.31.9", true},
		{"v0.31.13", "v0.31.13", true},
		{"v0.31.2", "v0.31.8", true},  // nothing below: oldest above
		{"v0.33.12", "v0.33.7", true}, // same minor only
		{"v0.37.0", "v0.37.2", true},  // prereleases never
		{"v0.29.6", "", false},
		{"v1.31.14", "", false},
	} {
		got, ok := nearestPatch(tc.want, served)
		if got != tc.got || ok != tc.ok {
			t.Errorf("nearestPatch(%s) = %q, %v; want %q, %v", tc.want, got, ok, tc.got, tc.ok)
		}
	}
}

func TestReleaseGo(t *testing.T) {
	toolchains := []string{
		"v0.0.1-go1.20.1.linux-amd64", "v0.0.1-go1.20.14.linux-amd64", "v0.0.1-go1.20.14.darwin-arm64",
		"v0.0.1-go1.22.9.linux-amd64", "v0.0.1-go1.22.12.linux-amd64", "v0.0.1-go1.22.12.linux-arm64",
		"v0.0.1-go1.23rc1.linux-amd64",
	}
	for _, tc := range []struct {
		name, mod, goos, goarch, want, wantErr string
	}{
		{"toolchain line wins", "module k8s.io/kubernetes\n\ngo 1.24.0\n\ntoolchain go1.24.4\n", "linux", "amd64", "go1.24.4", ""},
		{"newest patch of the go directive's minor", "module k8s.io/kubernetes\n\ngo 1.20\n", "linux", "amd64", "go1.20.14", ""},
		{"with a patch in the directive", "module k8s.io/kubernetes\n\ngo 1.22.0\n", "linux", "amd64", "go1.22.12", ""},
		{"per platform", "module k8s.io/kubernetes\n\ngo 1.22.0\n", "linux", "arm64", "go1.22.12", ""},
		{"no toolchain served", "module k8s.io/kubernetes\n\ngo 1.21\n", "linux", "amd64", "", "serves no Go 1.21 toolchain"},
		{"no go directive", "module k8s.io/kubernetes\n", "linux", "amd64", "", "names no Go version"},
	} {
		got, err := ReleaseGo([]byte(tc.mod), toolchains, tc.goos, tc.goarch)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %q, %v; want an error containing %q", tc.name, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestBinariesFollowTheVersion(t *testing.T) {
	v := KubeVersion{Minor: 31, Patch: 14}
	all := append(Binaries(v), append(NodeBinaries(v), KubectlBinary(v))...)
	kube := 0
	for _, b := range all {
		if b.Kube.IsZero() {
			if strings.Contains(b.Version, "v1.31") {
				t.Errorf("%s is not a Kubernetes binary but has version %s", b.Name, b.Version)
			}
			continue
		}
		kube++
		if b.Kube != v || b.Version != "v1.31.14" || b.Module != filepath.Join("test", "localcluster", "build", "kubernetes-v1.31.14") {
			t.Errorf("%s: %+v is not of v1.31.14", b.Name, b)
		}
		if !strings.HasSuffix(b.CacheKey, "-v1.31.14") || !strings.Contains(b.LDFlags, "gitMinor=31") {
			t.Errorf("%s: cache key %s, ldflags %s", b.Name, b.CacheKey, b.LDFlags)
		}
	}
	if kube != 5 {
		t.Errorf("%d Kubernetes binaries, want apiserver, controller-manager, scheduler, kubelet, kubectl", kube)
	}
	// The default keeps the cache key existing caches hold.
	if got := Binaries(DefaultKubeVersion())[2].CacheKey; got != "kubernetes-v1.37.2" {
		t.Errorf("default cache key %s", got)
	}
}

func TestKubeletConfigFor(t *testing.T) {
	info := &RealNodeInfo{Dir: "/n", CgroupRoot: "/tao", Gateway: "10.1.0.1", Subnet: "10.1.0.0/24", KubeletPort: 10250, HealthzPort: 10248}
	full := kubeletConfig(info, "/pki")
	for _, tc := range []struct {
		minor   int
		has     []string
		hasNot  []string
		comment bool
	}{
		{minor: 37, has: []string{"failCgroupV1: false", "podLogsDir:", "# This host has cgroup v1 only"}},
		{minor: 32, has: []string{"failCgroupV1: false", "podLogsDir:"}},
		{minor: 30, has: []string{"podLogsDir:", "cgroupDriver: cgroupfs"}, hasNot: []string{"failCgroupV1", "# This host has cgroup v1 only"}},
		{minor: 28, has: []string{"kind: KubeletConfiguration", "protectKernelDefaults: false"}, hasNot: []string{"failCgroupV1", "podLogsDir"}},
	} {
		got := kubeletConfigFor(full, tc.minor)
		for _, w := range tc.has {
			if !strings.Contains(got, w) {
				t.Errorf("1.%d: config lacks %q", tc.minor, w)
			}
		}
		for _, w := range tc.hasNot {
			if strings.Contains(got, w) {
				t.Errorf("1.%d: config has %q", tc.minor, w)
			}
		}
	}
	if kubeletConfigFor(full, DefaultKubeVersion().Minor) != full {
		t.Error("the newest kubelet's config was changed")
	}
}

func TestRealNodeVersionUnsupported(t *testing.T) {
	for v, want := range map[KubeVersion]string{
		{Minor: 31, Patch: 14}: "the real node runs Kubernetes 1.32 or newer",
		{Minor: 28, Patch: 15}: "not v1.28.15",
		{Minor: 32, Patch: 0}:  "",
		DefaultKubeVersion():   "",
	} {
		got := RealNodeVersionUnsupported(v)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", v, got, want)
		}
	}
}
