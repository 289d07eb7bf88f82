package gpustandin

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/gpumetrics"
)

func TestParseValues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Values
	}{
		{"", Values{}},
		{"util=97\nmem_used_mib=70000\nxid=79\n", Values{97, 70000, 79}},
		{" util = 42.5 \r\n# note\nother=1\nxid=abc\nmem_used_mib=-3", Values{Util: 42.5}},
		{"util=250", Values{Util: 100}},
		{"util=NaN\nmem_used_mib", Values{}},
	} {
		if got := ParseValues([]byte(tc.in)); got != tc.want {
			t.Errorf("ParseValues(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	v := Values{Util: 97.5, MemUsedMiB: 70000, Xid: 79}
	if got := ParseValues(v.Format()); got != v {
		t.Errorf("round trip of %+v gave %+v", v, got)
	}
	if f := (Values{MemUsedMiB: 90000}).FreeMiB(); f != 0 {
		t.Errorf("FreeMiB over the total = %d, want 0", f)
	}
}

// TestRenderDCGM compares the exporter's text with a golden file (checked by hand against
// dcgm-exporter's template: label order, HELP texts, value formats) and checks every line is
// well-formed exposition text with one series per GPU and counter.
func TestRenderDCGM(t *testing.T) {
	gpus := NodeGPUs([]string{"GPU-aaaa", "GPU-bbbb", "GPU-cccc"})
	devs := []DeviceState{
		{GPU: gpus[2]},
		{GPU: gpus[0], Holder: &Holder{Namespace: "team-a", Pod: "train-0", Container: "trainer"}, Values: Values{Util: 97, MemUsedMiB: 70000, Xid: 79}},
		{GPU: gpus[1], Holder: &Holder{Namespace: "team-a", Pod: "train-0", Container: "trainer"}, Values: Values{Util: 96.6, MemUsedMiB: 100}},
	}
	var buf bytes.Buffer
	if err := RenderDCGM(&buf, "real-1234", devs); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "dcgm.txt", buf.Bytes())
	series := regexp.MustCompile(`^([A-Z_]+)\{((?:[A-Za-z_]+="[^"]*",)*[A-Za-z_]+="[^"]*")\} (-?[0-9.]+)$`)
	counts := map[string]int{}
	var typed string
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || f[3] != "gauge" {
				t.Errorf("bad TYPE line %q", line)
			}
			typed = f[2]
		default:
			m := series.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("not a series line: %q", line)
				continue
			}
			if m[1] != typed {
				t.Errorf("series %s under the TYPE of %s", m[1], typed)
			}
			counts[m[1]]++
			if !strings.HasPrefix(m[2], `gpu="`) || !strings.Contains(m[2], `,UUID="GPU-`) || !strings.Contains(m[2], `,Hostname="real-1234",DCGM_FI_DRIVER_VERSION="580.95.05"`) {
				t.Errorf("labels out of dcgm-exporter's order: %s", m[2])
			}
		}
	}
	for _, name := range CounterNames() {
		if counts[name] != 3 {
			t.Errorf("%s: %d series, want 3", name, counts[name])
		}
	}
}

// A node of sliced GPUs serves each slice as dcgm-exporter serves a MIG device: GPU_I_PROFILE
// and GPU_I_ID, the slice's own framebuffer, its engine activity and no GPU_UTIL; top's parser
// maps each slice to the pod holding it.
func TestRenderDCGMMIG(t *testing.T) {
	slices, err := MIGDevices(NodeGPUs([]string{"GPU-aaaa-0001", "GPU-bbbb-0002"}), "1g.10gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var devs []DeviceState
	for _, s := range slices {
		ids[s.ID] = true
		devs = append(devs, DeviceState{GPU: s.GPU, Slice: &s.MIGSlice})
	}
	uuid := regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	for id := range ids {
		if !uuid.MatchString(id) {
			t.Errorf("slice ID %q is no MIG UUID", id)
		}
	}
	if len(ids) != 4 || MIGDeviceID("GPU-aaaa-0001", 7) != slices[0].ID {
		t.Errorf("slice IDs %v, want 4 distinct ones, each its GPU's and instance's", ids)
	}
	// The first slice of GPU 1 holds a busy rank; the others are nobody's.
	devs[2].Holder = &Holder{Namespace: "team-a", Pod: "train-0", Container: "trainer"}
	devs[2].Values = Values{Util: 91, MemUsedMiB: 4000}
	var buf bytes.Buffer
	if err := RenderDCGM(&buf, "real-1234", devs); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "dcgm-mig.txt", buf.Bytes())
	if strings.Contains(buf.String(), "DCGM_FI_DEV_GPU_UTIL{") {
		t.Errorf("a slice has GPU_UTIL, which DCGM has not for MIG devices:\n%s", buf.String())
	}
	gpus, err := gpumetrics.ParseDCGM(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got := gpumetrics.ForPod(gpus, "team-a", "train-0")
	if len(got) != 1 {
		t.Fatalf("train-0 holds %d devices, want its one slice: %+v", len(got), gpus)
	}
	g := got[0]
	if g.UUID != "GPU-bbbb-0002" || g.MIGProfile != "1g.10gb" || g.MIGInstance != "7" || g.Utilization == nil || *g.Utilization != 91 ||
		g.MemoryUsedBytes == nil || *g.MemoryUsedBytes != 4000<<20 || g.MemoryTotalBytes == nil || *g.MemoryTotalBytes != 9983<<20 {
		t.Errorf("train-0's slice reads %+v", g)
	}
	for _, bad := range []struct {
		profile string
		n       int
	}{{"3g.40gb", 1}, {"1g.10gb", 0}, {"1g.10gb", 8}} {
		if _, err := MIGDevices(NodeGPUs([]string{"GPU-a"}), bad.profile, bad.n); err == nil {
			t.Errorf("MIGDevices(%s, %d) cut the GPU", bad.profile, bad.n)
		}
	}
}

// checkGolden compares got with testdata/name (UPDATE_GOLDEN=1 rewrites it).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("exporter text differs from %s:\n%s", golden, got)
	}
}

func TestNvidiaSMI(t *testing.T) {
	v := Values{Util: 97, MemUsedMiB: 70000}
	visible := "GPU-x-000000000003,GPU-x-000000000001"
	for _, tc := range []struct {
		name    string
		args    []string
		visible string
		code    int
		out     string
	}{
		{"top's query", []string{"--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"}, visible, 0,
			"0, GPU-x-000000000001, 97, 70000, 81559\n1, GPU-x-000000000003, 97, 70000, 81559\n"},
		{"flags in any order, values apart", []string{"--format", "nounits,noheader,csv", "--query-gpu", "memory.total,index"}, visible, 0,
			"81559, 0\n81559, 1\n"},
		{"header and units", []string{"--query-gpu=utilization.gpu,memory.used", "--format=csv"}, "GPU-1", 0,
			"utilization.gpu [%], memory.used [MiB]\n97 %, 70000 MiB\n"},
		{"header keeps its units under nounits", []string{"--query-gpu=memory.total", "--format=csv,nounits"}, "GPU-1", 0,
			"memory.total [MiB]\n81559\n"},
		{"unknown field", []string{"--query-gpu=index,cuda_version", "--format=csv"}, visible, 2,
			"Field \"cuda_version\" is not a valid field to query.\n"},
		{"no format", []string{"--query-gpu=index"}, visible, 2,
			"\"--format=\" switch is missing. Please run 'nvidia-smi -h' for help.\n"},
		{"unknown option", []string{"--query-gpu=index", "--format=csv", "-lms100"}, visible, 2,
			"ERROR: Option -lms100 is not recognized. Please run 'nvidia-smi -h' for help.\n"},
		{"missing value", []string{"--format=csv", "--query-gpu"}, visible, 2,
			"ERROR: Option --query-gpu is missing its value. Please run 'nvidia-smi -h' for help.\n"},
		{"bad format option", []string{"--query-gpu=index", "--format=json"}, visible, 2,
			"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"},
		{"stray argument", []string{"--query-gpu=index", "--format=csv", "0"}, visible, 2,
			"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"},
		{"no devices", []string{"--query-gpu=index", "--format=csv"}, "", 6, "No devices were found\n"},
		{"void", []string{"--query-gpu=index", "--format=csv"}, "void", 6, "No devices were found\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := NvidiaSMI(tc.args, tc.visible, v, &out)
			if code != tc.code || out.String() != tc.out {
				t.Errorf("exit %d, output:\n%s\nwant exit %d, output:\n%s", code, out.String(), tc.code, tc.out)
			}
		})
	}
}
