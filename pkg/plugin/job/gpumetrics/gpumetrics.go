// Package gpumetrics reads GPU readings from the two sources `kubectl tao top` can reach without
// Prometheus: a dcgm-exporter scrape (Prometheus text format) and nvidia-smi's CSV output. It is a
// pure core: it parses bytes it is given and never talks to a cluster.
package gpumetrics

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// GPU is one GPU's reading. Pointers are nil when the source did not report the value, so that
// "unknown" is never shown as 0.
type GPU struct {
	UUID  string `json:"uuid"`
	Index string `json:"index,omitempty"` // dcgm label "gpu", or nvidia-smi's index
	Model string `json:"model,omitempty"` // modelName
	// Node is the exporter's Hostname (or hostname) label; it is not marshalled because the
	// caller knows the node it scraped, and the label is often the exporter pod's name.
	Node        string `json:"-"`
	MIGProfile  string `json:"migProfile,omitempty"`  // GPU_I_PROFILE
	MIGInstance string `json:"migInstance,omitempty"` // GPU_I_ID
	// Utilization is a percent 0-100: DCGM_FI_DEV_GPU_UTIL, else 100*DCGM_FI_PROF_GR_ENGINE_ACTIVE,
	// because MIG devices have no GPU_UTIL.
	Utilization    *float64 `json:"utilization"`
	GraphicsActive *float64 `json:"graphicsActive,omitempty"` // percent, 100*PROF_GR_ENGINE_ACTIVE where present
	TensorActive   *float64 `json:"tensorActive,omitempty"`   // percent, 100*PROF_PIPE_TENSOR_ACTIVE where present
	// MemoryUsedBytes is FB_USED (MiB) in bytes.
	MemoryUsedBytes *int64 `json:"memoryUsedBytes"`
	// MemoryTotalBytes is FB_USED + FB_FREE (+ FB_RESERVED where present) in bytes: the exporter
	// has no total counter, and nvidia-smi's total counts the reserved part too.
	MemoryTotalBytes *int64 `json:"memoryTotalBytes"`
	// Shared is true when the exporter shows the device shared by time-slicing: mapped to more
	// than one pod, or labelled with the replica a pod holds (vgpu, with its
	// DCGM_EXPORTER_KUBERNETES_VIRTUAL_GPUS on). Its readings are then the whole device's.
	Shared bool `json:"shared,omitempty"`
	// Xid is DCGM_FI_DEV_XID_ERRORS, the last Xid the GPU raised; the gauge keeps it set, so it
	// says a GPU has had one, not that it has one now. Nil when the gauge is 0 (no Xid).
	Xid *int `json:"xid,omitempty"`
	// The pod holding the GPU, from the exporter's kubelet mapping: labels namespace/pod/container,
	// or the old pod_namespace/pod_name/container_name. Empty when no pod holds it.
	Namespace string `json:"-"`
	Pod       string `json:"-"`
	Container string `json:"-"`
}

// Device names the GPU in a message: its UUID, and for a MIG device the slice of it, since
// the slices of one GPU share its UUID.
func (g GPU) Device() string {
	name := g.UUID
	if name == "" {
		name = "index " + g.Index
	}
	if g.MIGProfile != "" || g.MIGInstance != "" {
		name += fmt.Sprintf(" (MIG %s, instance %s)", g.MIGProfile, g.MIGInstance)
	}
	return name
}

// The counters ParseDCGM reads, by their upper-case name: --use-old-namespace lowercases the names.
const (
	fieldGPUUtil      = "DCGM_FI_DEV_GPU_UTIL"
	fieldFBUsed       = "DCGM_FI_DEV_FB_USED"
	fieldFBFree       = "DCGM_FI_DEV_FB_FREE"
	fieldFBReserved   = "DCGM_FI_DEV_FB_RESERVED"
	fieldXid          = "DCGM_FI_DEV_XID_ERRORS"
	fieldGRActive     = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	fieldTensorActive = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
)

// dcgmBlank is DCGM_INT32_BLANK: DCGM reports a value it does not have as a number at or above
// it (the int64 and float blanks are larger still), and a real reading of the counters read here
// never comes near it.
const dcgmBlank = 0x7ffffff0

const mib = 1 << 20

// reading collects one device's counters (for one pod) before they become a GPU.
type reading struct {
	gpu    GPU
	values map[string]float64 // by upper-case counter name
}

// ParseDCGM reads a dcgm-exporter scrape. It returns one GPU per device (UUID, else the gpu
// index, plus GPU_I_ID for a MIG device) and pod holding it, because a series is repeated for each
// container of a pod: those repeats are one reading. Families other than DCGM_FI_* are ignored.
// The result is sorted by node, Index (numerically), MIG instance, namespace and pod.
func ParseDCGM(r io.Reader) ([]GPU, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("reading the dcgm-exporter metrics: %w", err)
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names) // map order must not decide which container a GPU is shown with
	readings := map[string]*reading{}
	var order []string
	for _, name := range names {
		field := strings.ToUpper(name)
		if !strings.HasPrefix(field, "DCGM_FI_") {
			continue
		}
		for _, m := range families[name].GetMetric() {
			labels := labelMap(m)
			key, g := identify(labels)
			if key == "" {
				continue
			}
			rd := readings[key]
			if rd == nil {
				rd = &reading{gpu: g, values: map[string]float64{}}
				readings[key] = rd
				order = append(order, key)
			}
			rd.merge(g)
			// The replica a pod holds of a time-sliced device; the label is on every series.
			rd.gpu.Shared = rd.gpu.Shared || labels["vgpu"] != ""
			v, ok := value(m)
			if !ok {
				continue
			}
			rd.values[field] = v
		}
	}
	gpus := make([]GPU, 0, len(order))
	for _, key := range order {
		gpus = append(gpus, readings[key].finish())
	}
	markShared(gpus)
	sortGPUs(gpus)
	return gpus, nil
}

// markShared sets Shared on the devices the exporter maps to more than one pod: a device is its
// node, UUID (else index) and MIG instance.
func markShared(gpus []GPU) {
	pods := map[[4]string]map[string]bool{}
	key := func(g GPU) [4]string { return [4]string{g.Node, g.UUID, g.Index, g.MIGInstance} }
	for _, g := range gpus {
		if g.Pod == "" {
			continue
		}
		k := key(g)
		if pods[k] == nil {
			pods[k] = map[string]bool{}
		}
		pods[k][g.Namespace+"/"+g.Pod] = true
	}
	for i := range gpus {
		gpus[i].Shared = gpus[i].Shared || len(pods[key(gpus[i])]) > 1
	}
}

func labelMap(m *dto.Metric) map[string]string {
	labels := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// first returns the value of the first of names that is set: the exporter renamed labels over
// its versions and modes.
func first(labels map[string]string, names ...string) string {
	for _, n := range names {
		if v := labels[n]; v != "" {
			return v
		}
	}
	return ""
}

// identify returns the key of the device and pod a series belongs to and the GPU its labels
// describe; the key is "" for a series of no GPU (an NVSwitch's or a CPU's).
func identify(labels map[string]string) (string, GPU) {
	g := GPU{
		UUID:        first(labels, "UUID", "uuid"),
		Index:       labels["gpu"],
		Model:       first(labels, "modelName", "modelname"),
		Node:        first(labels, "Hostname", "hostname"),
		MIGProfile:  labels["GPU_I_PROFILE"],
		MIGInstance: labels["GPU_I_ID"],
		Namespace:   first(labels, "namespace", "pod_namespace"),
		Pod:         first(labels, "pod", "pod_name"),
		Container:   first(labels, "container", "container_name"),
	}
	device := g.UUID
	if device == "" {
		device = g.Index
	}
	if device == "" {
		return "", g
	}
	// Quoted, so that no two different label sets make the same key.
	return fmt.Sprintf("%q %q %q %q %q", g.Node, device, g.MIGInstance, g.Namespace, g.Pod), g
}

// merge fills what an earlier series of the same device left empty, and keeps the smallest
// container name so that the result does not depend on the order of the series.
func (rd *reading) merge(g GPU) {
	if rd.gpu.Model == "" {
		rd.gpu.Model = g.Model
	}
	if rd.gpu.MIGProfile == "" {
		rd.gpu.MIGProfile = g.MIGProfile
	}
	if rd.gpu.Index == "" {
		rd.gpu.Index = g.Index
	}

	if g.Container != "" && (rd.gpu.Container == "" || g.Container < rd.gpu.Container) {
		rd.gpu.Container = g.Container
	}
}

func value(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.Gauge != nil:
		v = m.GetGauge().GetValue()
	case m.Counter != nil:
		v = m.GetCounter().GetValue()
	case m.Untyped != nil:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v >= dcgmBlank {
		return 0, false
	}
	return v, true
}

// get returns the reading's value of a counter, nil when the scrape had none.
func (rd *reading) get(field string) *float64 {
	v, ok := rd.values[field]
	if !ok {
		return nil
	}
	return &v
}

// percent turns a PROF ratio (0-1) into the percent the table shows.
func percent(ratio *float64) *float64 {
	if ratio == nil {
		return nil
	}
	// Rounded to what DCGM's six decimals of a ratio give, so that float noise does not show.
	p := math.Round(*ratio*1e6) / 1e4
	return &p
}

func mibToBytes(v float64) *int64 {
	b := int64(math.Round(v * mib))
	return &b
}

func (rd *reading) finish() GPU {
	g := rd.gpu
	g.GraphicsActive = percent(rd.get(fieldGRActive))
	g.TensorActive = percent(rd.get(fieldTensorActive))
	g.Utilization = rd.get(fieldGPUUtil)
	if g.Utilization == nil {
		g.Utilization = g.GraphicsActive
	}
	if used := rd.get(fieldFBUsed); used != nil {
		g.MemoryUsedBytes = mibToBytes(*used)
		if free := rd.get(fieldFBFree); free != nil {
			total := *used + *free
			if reserved := rd.get(fieldFBReserved); reserved != nil {
				total += *reserved
			}
			g.MemoryTotalBytes = mibToBytes(total)
		}
	}
	if xid := rd.get(fieldXid); xid != nil && *xid != 0 {
		x := int(*xid)
		g.Xid = &x
	}
	return g
}

// numericLess orders numeric strings by value and puts the others after them, by text.
func numericLess(a, b string) (less, decided bool) {
	na, errA := strconv.Atoi(a)
	nb, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return na < nb, na != nb
	case errA == nil:
		return true, true
	case errB == nil:
		return false, true
	}
	return a < b, a != b
}

func sortGPUs(gpus []GPU) {
	sort.SliceStable(gpus, func(i, j int) bool {
		a, b := gpus[i], gpus[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		if less, ok := numericLess(a.Index, b.Index); ok {
			return less
		}
		if less, ok := numericLess(a.MIGInstance, b.MIGInstance); ok {
			return less
		}
		if a.UUID != b.UUID {
			return a.UUID < b.UUID
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Pod < b.Pod
	})
}

// ForPod returns the GPUs the pod holds, in their order.
func ForPod(gpus []GPU, namespace, pod string) []GPU {
	var out []GPU
	for _, g := range gpus {
		if g.Namespace == namespace && g.Pod == pod {
			out = append(out, g)
		}
	}
	return out
}

// hardwareXids are the Xids NVIDIA's GPU debug guidelines send to hardware inspection or a
// reset rather than to the application: 48 (double-bit ECC), 63/64 (row remapping), 74 (NVLink),
// 79 (fallen off the bus), 94/95 (contained/uncontained ECC).
var hardwareXids = map[int]bool{48: true, 63: true, 64: true, 74: true, 79: true, 94: true, 95: true}

// HardwareXid reports whether an Xid is one of the hardware ones: 48, 63, 64, 74, 79, 94, 95,
// so that top can tell a broken GPU from a crashed program.
func HardwareXid(xid int) bool { return hardwareXids[xid] }

// nvidiaSMIFields is the number of columns of the query ParseNvidiaSMI reads:
// index,uuid,utilization.gpu,memory.used,memory.total.
const nvidiaSMIFields = 5

// ParseNvidiaSMI reads the output of
// `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
// (memory in MiB), the fallback where no exporter runs. A field nvidia-smi cannot give
// ("[N/A]", "[Not Supported]", any bracketed note) becomes nil; any other bad line is an error
// naming it, because it is most likely nvidia-smi's own error message.
func ParseNvidiaSMI(out []byte) ([]GPU, error) {
	var gpus []GPU
	for n, line := range bytes.Split(out, []byte("\n")) {
		text := strings.TrimSpace(string(line))
		if text == "" {
			continue
		}
		g, err := parseSMILine(text)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi output line %d %q: %w", n+1, text, err)
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

func parseSMILine(text string) (GPU, error) {
	fields := strings.Split(text, ",")
	if len(fields) != nvidiaSMIFields {
		return GPU{}, fmt.Errorf("has %d fields, not %d", len(fields), nvidiaSMIFields)
	}
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	g := GPU{Index: fields[0], UUID: fields[1]}
	if _, err := strconv.Atoi(g.Index); err != nil {
		return GPU{}, fmt.Errorf("index %q is not a number", g.Index)
	}
	if g.UUID == "" || unavailable(g.UUID) {
		return GPU{}, fmt.Errorf("no UUID")
	}
	if !unavailable(fields[2]) {
		u, err := strconv.ParseFloat(fields[2], 64)
		if err != nil || u < 0 || math.IsNaN(u) || math.IsInf(u, 0) {
			return GPU{}, fmt.Errorf("utilization %q is not a percentage", fields[2])
		}
		g.Utilization = &u
	}
	var err error
	if g.MemoryUsedBytes, err = smiMiB(fields[3]); err != nil {
		return GPU{}, fmt.Errorf("memory.used: %w", err)
	}
	if g.MemoryTotalBytes, err = smiMiB(fields[4]); err != nil {
		return GPU{}, fmt.Errorf("memory.total: %w", err)
	}
	return g, nil
}

// unavailable reports a field nvidia-smi fills with a note instead of a value.
func unavailable(field string) bool {
	return field == "N/A" || (strings.HasPrefix(field, "[") && strings.HasSuffix(field, "]"))
}

// maxMiB keeps MiB * 2^20 within int64.
const maxMiB = math.MaxInt64 >> 20

func smiMiB(field string) (*int64, error) {
	if unavailable(field) {
		return nil, nil
	}
	v, err := strconv.ParseInt(field, 10, 64)
	if err != nil || v < 0 || v > maxMiB {
		return nil, fmt.Errorf("%q is not a number of MiB", field)
	}
	b := v * mib
	return &b, nil
}
