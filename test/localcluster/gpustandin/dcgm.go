package gpustandin

import (
	"bufio"
	"crypto/sha256"
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
// container holds. A MIG slice is a device of its own to the exporter: GPU_I_PROFILE and GPU_I_ID
// follow modelName, its GPU's index and UUID stay, and it has only the counters DCGM keeps per
// GPU instance (framebuffer and profiling), so no GPU_UTIL: utilisation is GR_ENGINE_ACTIVE.

// GPUResource is the extended resource whose devices the exporter maps to pods, as
// dcgm-exporter does (devices of other resources get no pod labels).
const GPUResource = "nvidia.com/gpu"

// MIGResourcePrefix and a profile name the resource of the profile's slices under the MIG
// mixed strategy (nvidia.com/mig-1g.10gb), whose devices the exporter maps to pods instead.
const MIGResourcePrefix = "nvidia.com/mig-"

// MIGProfile is the profile the stand-ins cut GPUs into unless told otherwise.
const MIGProfile = "1g.10gb"

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

// DeviceState is one GPU, or one MIG slice of it (Slice), at scrape time: who holds it (nil:
// no one) and what it shows.
type DeviceState struct {
	GPU
	Slice  *MIGSlice
	Holder *Holder
	Values Values
}

// MIGSlice is a MIG device of a GPU: its profile, its GPU instance ID and its framebuffer.
type MIGSlice struct {
	Profile    string
	InstanceID int
	MemoryMiB  int
}

// MIGDevice is a slice as the device plugin advertises it: ID is its device ID, the MIG UUID
// the kubelet hands out and the exporter maps to the slice's pod.
type MIGDevice struct {
	GPU
	MIGSlice
	ID string
}

// migProfiles are the MIG profiles the stand-in cuts its H100 80GB into: the framebuffer of
// one slice (used + free, as dcgm-exporter's own MIG test reads it) and the GPU instance ID of
// the first slice (DCGM numbers an H100's seven 1g.10gb instances from 7).
var migProfiles = map[string]struct{ memoryMiB, firstInstance, max int }{
	"1g.10gb": {memoryMiB: 9983, firstInstance: 7, max: 7},
}

// MIGDevices cuts each GPU into perGPU slices of profile, in index and instance order.
func MIGDevices(gpus []GPU, profile string, perGPU int) ([]MIGDevice, error) {
	p, ok := migProfiles[profile]
	if !ok {
		return nil, fmt.Errorf("MIG profile %q is not one the stand-in knows (1g.10gb)", profile)
	}
	if perGPU < 1 || perGPU > p.max {
		return nil, fmt.Errorf("a GPU has 1 to %d %s slices, not %d", p.max, profile, perGPU)
	}
	var out []MIGDevice
	for _, g := range gpus {
		for k := range perGPU {
			gi := p.firstInstance + k
			out = append(out, MIGDevice{GPU: g, MIGSlice: MIGSlice{Profile: profile, InstanceID: gi, MemoryMiB: p.memoryMiB}, ID: MIGDeviceID(g.UUID, gi)})
		}
	}
	return out, nil
}

// MIGDeviceID is the MIG UUID of a GPU's slice: MIG- and a UUID made from a hash of the GPU's
// UUID and the instance, so that it is stable and distinct per slice, as a real one is.
func MIGDeviceID(gpuUUID string, instance int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", gpuUUID, instance))
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
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

// migCounters are the counters DCGM keeps per GPU instance: a slice shows only these.
var migCounters = map[string]bool{
	"DCGM_FI_DEV_FB_FREE": true, "DCGM_FI_DEV_FB_USED": true,
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE": true, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": true,
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
	{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge", nil}, // the device's, see freeMiB
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
	sort.SliceStable(devs, func(i, j int) bool {
		if devs[i].Index != devs[j].Index {
			return devs[i].Index < devs[j].Index
		}
		return devs[i].instance() < devs[j].instance()
	})
	bw := bufio.NewWriter(w)
	for _, c := range dcgmCounters {
		var of []DeviceState
		for _, d := range devs {
			if d.Slice == nil || migCounters[c.name] {
				of = append(of, d)
			}
		}
		// The exporter writes a counter's family only with the series it collected.
		if len(of) == 0 {
			continue
		}
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", c.name, c.help, c.name, c.typ)
		for _, d := range of {
			mig := ""
			if d.Slice != nil {
				mig = fmt.Sprintf(`,GPU_I_PROFILE="%s",GPU_I_ID="%d"`, d.Slice.Profile, d.Slice.InstanceID)
			}
			fmt.Fprintf(bw, `%s{gpu="%d",UUID="%s",pci_bus_id="%s",device="nvidia%d",modelName="%s"%s,Hostname="%s",DCGM_FI_DRIVER_VERSION="%s"`,
				c.name, d.Index, d.UUID, d.PCIBusID, d.Index, ModelName, mig, hostname, DriverVersion)
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
			value := strconv.Itoa(d.freeMiB())
			if c.value != nil {
				value = c.value(d.Values)
			}
			fmt.Fprintf(bw, "} %s\n", value)
		}
	}
	return bw.Flush()
}

// instance is the slice's GPU instance ID, -1 for a whole GPU.
func (d DeviceState) instance() int {
	if d.Slice == nil {
		return -1
	}
	return d.Slice.InstanceID
}

// freeMiB is the framebuffer the device has left: a slice's own, else the GPU's (FreeMiB).
func (d DeviceState) freeMiB() int {
	if d.Slice != nil {
		return max(0, d.Slice.MemoryMiB-d.Values.MemUsedMiB)
	}
	return d.Values.FreeMiB()
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
