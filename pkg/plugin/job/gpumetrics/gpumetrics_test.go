package gpumetrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
)

// goldenGPU is GPU as the golden files show it: the fields GPU keeps out of its JSON are what a
// caller matches pods and nodes on, so the golden files must show them too.
type goldenGPU struct {
	GPU
	Node      string `json:"node,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
}

// TestParseDCGMGolden parses every scrape under testdata (see testdata/README.md for where each
// comes from) and compares the result with X.golden.json.
func TestParseDCGMGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.prom"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scrapes under testdata: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".prom")
		t.Run(name, func(t *testing.T) {
			gpus := parseFile(t, file)
			out := make([]goldenGPU, len(gpus))
			for i, g := range gpus {
				out[i] = goldenGPU{GPU: g, Node: g.Node, Namespace: g.Namespace, Pod: g.Pod, Container: g.Container}
			}
			b, err := json.MarshalIndent(out, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, name+".golden.json", string(b)+"\n")
		})
	}
}

// parseFile is ParseDCGM of a scrape under testdata.
func parseFile(t *testing.T, file string) []GPU {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gpus, err := ParseDCGM(f)
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

// checkParse compares a parser's result with the table's: an error containing wantErr, or want.
func checkParse(t *testing.T, got []GPU, err error, want []GPU, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseDCGM(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []GPU
		wantErr  string
	}{{
		name: "empty scrape",
		in:   "",
		want: []GPU{},
	}, {
		name: "other families ignored",
		in:   "go_goroutines 42\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n",
		want: []GPU{},
	}, {
		name: "text format error",
		in:   "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 12\n",
		// The parser's own message says what is wrong; that it is ours to report is enough here.
		wantErr: "reading the dcgm-exporter metrics",
	}, {
		name: "GPU_UTIL wins over GR_ENGINE_ACTIVE; blank values dropped",
		in: `DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 40
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-b"} 0.5
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b"} 9223372036854775794
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 2147483632
`,
		want: []GPU{
			{UUID: "GPU-a", Index: "0"},
			{UUID: "GPU-b", Index: "1", Utilization: ptr(40.0), GraphicsActive: ptr(50.0)},
		},
	}, {
		name: "index sorts numerically, no UUID keys by index",
		in: `DCGM_FI_DEV_GPU_UTIL{gpu="10"} 1
DCGM_FI_DEV_GPU_UTIL{gpu="9"} 2
DCGM_FI_DEV_GPU_UTIL{gpu="0",GPU_I_ID="13",GPU_I_PROFILE="1g.10gb"} 3
DCGM_FI_DEV_GPU_UTIL{gpu="0",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb"} 4
DCGM_FI_DEV_GPU_UTIL{UUID="",gpu=""} 5
`,
		want: []GPU{
			{Index: "0", MIGProfile: "1g.10gb", MIGInstance: "2", Utilization: ptr(4.0)},
			{Index: "0", MIGProfile: "1g.10gb", MIGInstance: "13", Utilization: ptr(3.0)},
			{Index: "9", Utilization: ptr(2.0)},
			{Index: "10", Utilization: ptr(1.0)},
		},
	}, {
		name: "one GPU shared by two pods is one reading per pod",
		in: `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",namespace="a",pod="p",container="c"} 7
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",namespace="b",pod="p",container="c"} 7
`,
		want: []GPU{
			{UUID: "GPU-a", Index: "0", Utilization: ptr(7.0), Shared: true, Namespace: "a", Pod: "p", Container: "c"},
			{UUID: "GPU-a", Index: "0", Utilization: ptr(7.0), Shared: true, Namespace: "b", Pod: "p", Container: "c"},
		},
	}, {
		// Time-slicing with the exporter's virtual-GPU mapping: a series per replica a pod holds.
		name: "a vgpu label marks a shared GPU even with one pod mapped",
		in: `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",namespace="a",pod="p",container="c",vgpu="1"} 7
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",namespace="a",pod="q",container="c"} 8
`,
		want: []GPU{
			{UUID: "GPU-a", Index: "0", Utilization: ptr(7.0), Shared: true, Namespace: "a", Pod: "p", Container: "c"},
			{UUID: "GPU-b", Index: "1", Utilization: ptr(8.0), Namespace: "a", Pod: "q", Container: "c"},
		},
	}, {
		// The slices of one GPU share its UUID: two pods on two slices share nothing.
		name: "two MIG slices of one GPU held by two pods are not shared",
		in: `DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="11",namespace="a",pod="p"} 0.5
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="13",namespace="a",pod="q"} 0.25
`,
		want: []GPU{
			{UUID: "GPU-a", Index: "0", MIGProfile: "1g.10gb", MIGInstance: "11", Utilization: ptr(50.0), GraphicsActive: ptr(50.0), Namespace: "a", Pod: "p"},
			{UUID: "GPU-a", Index: "0", MIGProfile: "1g.10gb", MIGInstance: "13", Utilization: ptr(25.0), GraphicsActive: ptr(25.0), Namespace: "a", Pod: "q"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDCGM(strings.NewReader(tc.in))
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestForPod(t *testing.T) {
	gpus := []GPU{
		{UUID: "a", Namespace: "tao", Pod: "w-0"},
		{UUID: "b"},
		{UUID: "c", Namespace: "tao", Pod: "w-1"},
		{UUID: "d", Namespace: "other", Pod: "w-0"},
		{UUID: "e", Namespace: "tao", Pod: "w-0"},
	}
	got := ForPod(gpus, "tao", "w-0")
	if diff := cmp.Diff([]GPU{gpus[0], gpus[4]}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := ForPod(gpus, "tao", "none"); got != nil {
		t.Errorf("ForPod of no pod = %v, want nil", got)
	}
}

func TestDevice(t *testing.T) {
	for _, tc := range []struct {
		g    GPU
		want string
	}{
		{GPU{UUID: "GPU-a", Index: "0"}, "GPU-a"},
		{GPU{Index: "3"}, "index 3"},
		{GPU{UUID: "GPU-a", MIGProfile: "1g.10gb", MIGInstance: "13"}, "GPU-a (MIG 1g.10gb, instance 13)"},
	} {
		if got := tc.g.Device(); got != tc.want {
			t.Errorf("Device() of %+v = %q, want %q", tc.g, got, tc.want)
		}
	}
}

func TestHardwareXid(t *testing.T) {
	for xid, want := range map[int]bool{
		48: true, 63: true, 64: true, 74: true, 79: true, 94: true, 95: true,
		0: false, 13: false, 31: false, 43: false, 45: false, 92: false, -1: false,
	} {
		if got := HardwareXid(xid); got != want {
			t.Errorf("HardwareXid(%d) = %v, want %v", xid, got, want)
		}
	}
}

const mb = int64(1 << 20)

func TestParseNvidiaSMI(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []GPU
		wantErr  string
	}{{
		name: "empty output",
		in:   "",
	}, {
		name: "two GPUs, trailing newline",
		in: "0, GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b, 97, 70000, 81559\n" +
			"1, GPU-15338f3e-5fd9-962d-921a-979b820520f0, 0, 0, 81559\n",
		want: []GPU{
			{Index: "0", UUID: "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b", Utilization: ptr(97.0),
				MemoryUsedBytes: ptr(70000 * mb), MemoryTotalBytes: ptr(81559 * mb)},
			{Index: "1", UUID: "GPU-15338f3e-5fd9-962d-921a-979b820520f0", Utilization: ptr(0.0),
				MemoryUsedBytes: ptr(int64(0)), MemoryTotalBytes: ptr(81559 * mb)},
		},
	}, {
		// MIG mode: the parent GPU has no utilization; a unified-memory GPU (GB10) no memory figures.
		name: "N/A and Not Supported fields are nil, CRLF and blank lines tolerated",
		in: "0, GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167, [N/A], 37, 81920\r\n\r\n" +
			"1, GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb, 12, [Not Supported], [N/A]\r\n",
		want: []GPU{
			{Index: "0", UUID: "GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167",
				MemoryUsedBytes: ptr(37 * mb), MemoryTotalBytes: ptr(81920 * mb)},
			{Index: "1", UUID: "GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb", Utilization: ptr(12.0)},
		},
	}, {
		name:    "nvidia-smi's own error is a bad line",
		in:      "Unable to determine the device handle for GPU0000:01:00.0: GPU has fallen off the bus.\n",
		wantErr: `line 1 "Unable to determine the device handle for GPU0000:01:00.0: GPU has fallen off the bus."`,
	}, {
		name:    "a header (csv without noheader) is a bad line",
		in:      "index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n0, GPU-a, 1, 2, 3\n",
		wantErr: "line 1",
	}, {
		name:    "too few fields",
		in:      "0, GPU-a, 1, 2, 3\n1, GPU-b, 1, 2\n",
		wantErr: "line 2 \"1, GPU-b, 1, 2\": has 4 fields, not 5",
	}, {
		name:    "units left in (csv without nounits)",
		in:      "0, GPU-a, 97 %, 70000 MiB, 81559 MiB\n",
		wantErr: "utilization \"97 %\" is not a percentage",
	}, {
		name:    "negative memory",
		in:      "0, GPU-a, 1, -2, 3\n",
		wantErr: "memory.used: \"-2\" is not a number of MiB",
	}, {
		name:    "memory overflowing bytes",
		in:      "0, GPU-a, 1, 2, 99999999999999999\n",
		wantErr: "memory.total",
	}, {
		name:    "no UUID",
		in:      "0, [N/A], 1, 2, 3\n",
		wantErr: "no UUID",
	}, {
		name:    "index not a number",
		in:      "x, GPU-a, 1, 2, 3\n",
		wantErr: "index \"x\" is not a number",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNvidiaSMI([]byte(tc.in))
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
	}
}

// FuzzParseNvidiaSMI checks that no output of nvidia-smi makes the parser panic, and that what
// it accepts has what every GPU needs.
func FuzzParseNvidiaSMI(f *testing.F) {
	for _, seed := range []string{
		"0, GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b, 97, 70000, 81559\n",
		"0, GPU-a, [N/A], [Not Supported], [N/A]\r\n",
		"Unable to determine the device handle for GPU0000:01:00.0: GPU has fallen off the bus.\n",
		",,,,\n", "\n\n", "0, GPU-a, 1e309, 1, 1",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		gpus, err := ParseNvidiaSMI(out)
		if err != nil {
			return
		}
		for _, g := range gpus {
			if g.UUID == "" || g.Index == "" {
				t.Errorf("accepted a GPU without UUID or index: %+v", g)
			}
		}
	})
}

// A MIG slice a pod holds is found by the pod's labels, reads its engine activity as its
// utilisation and its own framebuffer as its memory; the other slice of the same GPU, held by
// no pod, is not the pod's.
func TestParseDCGMMIGSliceOfPod(t *testing.T) {
	gpus := parseFile(t, filepath.Join("testdata", "derived-h100-mig-pods.prom"))
	got := ForPod(gpus, "testing", "ollama-76f687f4cd-xcvvp")
	want := []GPU{{
		UUID: "GPU-be839661-c0f5-7452-284b-b875666df60c", Index: "0", Model: "NVIDIA H100 80GB HBM3", Node: "localhost",
		MIGProfile: "1g.10gb", MIGInstance: "11", Utilization: ptr(41.2345), GraphicsActive: ptr(41.2345), TensorActive: ptr(10.321),
		MemoryUsedBytes: ptr(14 * mb), MemoryTotalBytes: ptr((14 + 9969) * mb),
		Namespace: "testing", Pod: "ollama-76f687f4cd-xcvvp", Container: "ollama",
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
