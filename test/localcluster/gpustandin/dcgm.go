package gpustandin

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The dcgm-exporter stand-in's text: what dcgm-exporter 4.5 (the GPU Operator's) serves on
// /metrics with its Kubernetes mapping on, for the counters `kubectl tao top` reads. Series of a
// counter follow its HELP and TYPE lines; counters come in DCGM field-ID order, as the exporter's
// template ranges over them; every series has gpu, UUID, pci_bus_id, device, modelName and
// Hostname in that order, then the label counter DCGM_FI_DRIVER_VERSION, then the attributes
// sorted by name: err_code and err_msg on Xid series, container, namespace and pod on a GPU a
// container holds.

// GPUResource is the extended resource whose devices the exporter maps to pods, as
// dcgm-exporter does (devices of other resources get no pod labels).
const GPUResource = "nvidia.com/gpu"

// GPU is one device of the node: its index, UUID (the device plugin's device ID) and PCI bus.
type GPU struct {
	Index    int
	UUID     string
	PCIBusID string
}

// Holder is the container the kubelet gave a GPU to, from the PodResources API.
type Holder struct {
	Namespace, Pod, Container string
}

// DeviceState is one GPU at scrape time: who holds it (nil: no one) and what it shows.
type DeviceState struct {
	GPU
	Holder *Holder
	Values Values
}

// NodeGPUs are a node's GPUs for the given device IDs, with the PCI bus IDs of an 8-GPU HGX
// H100 board (more GPUs get made-up buses after them).
func NodeGPUs(ids []string) []GPU {
	buses := []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}
	gpus := make([]GPU, len(ids))
	for i, id := range ids {
		bus := 0xe0 + i
		if i < len(buses) {
			bus = buses[i]
		}
		gpus[i] = GPU{Index: i, UUID: id, PCIBusID: fmt.Sprintf("00000000:%02X:00.0", bus)}
	}
	return gpus
}

type dcgmCounter struct {
	name, help, typ string
	value           func(Values) string
}

func ratio(v Values, scale float64) string {
	return fmt.Sprintf("%f", math.Round(v.Util*scale*1e4)/1e6)
}

// dcgmCounters are the stand-in's counters with the HELP texts of dcgm-exporter's
// default-counters.csv, in field-ID order (203, 230, 251, 252, 253, 1001, 1004). Integer
// fields print as integers and the profiling ratios with six decimals, as the exporter
// formats DCGM's int64 and double values. The tensor pipe is taken as busy half the time the
// engine is.
var dcgmCounters = []dcgmCounter{
	{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge", func(v Values) string { return strconv.Itoa(int(math.Round(v.Util))) }},
	{"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge", func(v Values) string { return strconv.Itoa(v.Xid) }},
	{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge", func(v Values) string { return strconv.Itoa(v.FreeMiB()) }},
	{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge", func(v Values) string { return strconv.Itoa(v.MemUsedMiB) }},
	{"DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", "gauge", func(Values) string { return strconv.Itoa(FBReservedMiB) }},
	{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gauge", func(v Values) string { return ratio(v, 1) }},
	{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", "gauge", func(v Values) string { return ratio(v, 0.5) }},
}

// CounterNames are the names of the counters RenderDCGM writes, in its order.
func CounterNames() []string {
	names := make([]string, len(dcgmCounters))
	for i, c := range dcgmCounters {
		names[i] = c.name
	}
	return names
}

// xidMessages are the err_msg texts of the Xids tests are likely to set, from NVIDIA's Xid
// catalogue as dcgm-exporter words them; any other code reads "Unknown Error" here.
var xidMessages = map[int]string{
	0:   "No Error",
	13:  "Graphics Engine Exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	48:  "Double Bit ECC Error",
	63:  "ECC page retirement or row remapping recording event",
	64:  "ECC page retirement or row remapper recording failure",
	74:  "NVLINK Error",
	79:  "GPU has fallen off the bus",
	92:  "High single-bit ECC error rate",
	94:  "Contained ECC error",
	95:  "Uncontained ECC error",
	119: "GSP RPC Timeout",
}

// XidMessage is the err_msg label of an Xid series.
func XidMessage(code int) string {
	if m, ok := xidMessages[code]; ok {
		return m
	}
	return "Unknown Error"
}

// RenderDCGM writes the exporter's /metrics text for devs on the node hostname.
func RenderDCGM(w io.Writer, hostname string, devs []DeviceState) error {
	devs = append([]DeviceState(nil), devs...)
	sort.SliceStable(devs, func(i, j int) bool { return devs[i].Index < devs[j].Index })
	bw := bufio.NewWriter(w)
	for _, c := range dcgmCounters {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", c.name, c.help, c.name, c.typ)
		for _, d := range devs {
			fmt.Fprintf(bw, `%s{gpu="%d",UUID="%s",pci_bus_id="%s",device="nvidia%d",modelName="%s",Hostname="%s",DCGM_FI_DRIVER_VERSION="%s"`,
				c.name, d.Index, d.UUID, d.PCIBusID, d.Index, ModelName, hostname, DriverVersion)
			attrs := map[string]string{}
			if c.name == "DCGM_FI_DEV_XID_ERRORS" {
				attrs["err_code"] = strconv.Itoa(d.Values.Xid)
				attrs["err_msg"] = XidMessage(d.Values.Xid)
			}
			if d.Holder != nil {
				attrs["container"], attrs["namespace"], attrs["pod"] = d.Holder.Container, d.Holder.Namespace, d.Holder.Pod
			}
			keys := make([]string, 0, len(attrs))
			for k := range attrs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(bw, `,%s="%s"`, k, attrs[k])
			}
			fmt.Fprintf(bw, "} %s\n", c.value(d.Values))
		}
	}
	return bw.Flush()
}

// SplitIDs splits a comma-separated device list (NVIDIA_VISIBLE_DEVICES, the exporter's
// --gpus), dropping empty items.
func SplitIDs(s string) []string {
	var out []string
	for _, id := range strings.Split(s, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}
