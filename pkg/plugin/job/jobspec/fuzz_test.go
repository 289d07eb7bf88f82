package jobspec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The fuzz targets of the parsers of submit's flags (make fuzz-short runs each for a few seconds,
// make fuzz longer). Each asserts what the parser promises: an accepted value round-trips and is
// one the API server takes; a refused one is an error and the zero value, never half a result.

// splitFlag turns one fuzzed string into the values of a repeatable flag, one per line.
func splitFlag(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func FuzzParseToleration(f *testing.F) {
	for _, s := range []string{
		"nvidia.com/gpu:NoSchedule", "dedicated=ml:NoSchedule", "key:", "key=:NoExecute",
		"a=b=c:PreferNoSchedule", ":NoSchedule", "k", "k:Bogus", "example.com/k=v:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tol, err := ParseToleration(s)
		if err != nil {
			if !reflect.DeepEqual(tol, corev1.Toleration{}) {
				t.Fatalf("ParseToleration(%q) refused it (%v) but returned %+v", s, err, tol)
			}
			return
		}
		if msgs := validation.IsQualifiedName(tol.Key); len(msgs) > 0 {
			t.Fatalf("ParseToleration(%q) accepted key %q: %v", s, tol.Key, msgs)
		}
		switch tol.Operator {
		case corev1.TolerationOpExists:
			if tol.Value != "" {
				t.Fatalf("ParseToleration(%q): operator Exists with value %q", s, tol.Value)
			}
		case corev1.TolerationOpEqual:
			if msgs := validation.IsValidLabelValue(tol.Value); len(msgs) > 0 {
				t.Fatalf("ParseToleration(%q) accepted value %q: %v", s, tol.Value, msgs)
			}
		default:
			t.Fatalf("ParseToleration(%q): operator %q", s, tol.Operator)
		}
		// Written back the way the flag takes it, it reads the same.
		back := tol.Key
		if tol.Operator == corev1.TolerationOpEqual {
			back += "=" + tol.Value
		}
		back += ":" + string(tol.Effect)
		if back != s {
			t.Fatalf("ParseToleration(%q) = %+v, which writes back as %q", s, tol, back)
		}
	})
}

func FuzzParseKeyValues(f *testing.F) {
	for _, s := range []string{"A=1", "A=1\nB=", "A=b=c", "A", "=v", "A=1\nA=2", "example.com/x=y\nz=$(HOME)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		values := splitFlag(s)
		kvs, err := ParseKeyValues("env", values)
		if err != nil {
			if kvs != nil {
				t.Fatalf("ParseKeyValues(%q) refused them (%v) but returned %v", values, err, kvs)
			}
			if !strings.Contains(err.Error(), "--env") {
				t.Fatalf("ParseKeyValues(%q): the error does not name the flag: %v", values, err)
			}
			return
		}
		if len(kvs) != len(values) {
			t.Fatalf("ParseKeyValues(%q) = %d pairs", values, len(kvs))
		}
		seen := map[string]bool{}
		for i, kv := range kvs {
			if kv.Key == "" || seen[kv.Key] || strings.Contains(kv.Key, "=") {
				t.Fatalf("ParseKeyValues(%q): pair %d has key %q", values, i, kv.Key)
			}
			seen[kv.Key] = true
			if kv.Key+"="+kv.Value != values[i] {
				t.Fatalf("ParseKeyValues(%q): pair %d %+v does not write back as %q", values, i, kv, values[i])
			}
		}
	})
}

func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"data:/data", "data:/data:ro", "data:/data:rw", "data", "a:b:c:d", ":/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVolume(s)
		if err != nil {
			if v != (Volume{}) {
				t.Fatalf("ParseVolume(%q) refused it (%v) but returned %+v", s, err, v)
			}
			return
		}
		back := v.Claim + ":" + v.MountPath
		if v.ReadOnly {
			back += ":ro"
		}
		if again, err := ParseVolume(back); err != nil || again != v {
			t.Fatalf("ParseVolume(%q) = %+v, written back as %q it reads %+v, %v", s, v, back, again, err)
		}
	})
}

func FuzzParseFileFlag(f *testing.F) {
	for _, s := range []string{"./train.yaml:/specs/train.yaml", `C:\x\y.yaml:/specs/y.yaml`, "a:/specs/..data", "a:", ":b", "ab", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		local, container, err := ParseFileFlag(s)
		if err != nil {
			if local != "" || container != "" {
				t.Fatalf("ParseFileFlag(%q) refused it (%v) but returned %q, %q", s, err, local, container)
			}
			return
		}
		if local == "" || container == "" || strings.Contains(container, ":") || local+":"+container != s {
			t.Fatalf("ParseFileFlag(%q) = %q, %q", s, local, container)
		}
		// A container path the spec accepts becomes a ConfigMap key the API server accepts.
		if validateMountPath("file", container) == nil {
			if msgs := validation.IsConfigMapKey(fileKey(container)); len(msgs) > 0 {
				t.Fatalf("--file %q: the container path is accepted but its ConfigMap key %q is not: %v", s, fileKey(container), msgs)
			}
		}
	})
}

// FuzzSpec runs fuzzed flag values through the parsers and Validate, as submit does, and holds
// Build to what Validate promised: it does not panic, and every object it makes carries the
// values as given (labels, node selector, env after the kubelet's expansion, quantities, TTL and
// deadline), in a form that survives the JSON the API server reads.
func FuzzSpec(f *testing.F) {
	f.Add("train", 1, 8, "A=1\nB=$(HOME)", "team=ml", "pool=a100", "dedicated=ml:NoSchedule", "rdma/ib=1",
		"32", "256Gi", "16Gi", "/specs/train.yaml", int64(time.Hour), int64(72*time.Hour))
	f.Add("big", 4, 0, "", "", "", "", "", "500m", "1e3", "", "/specs/a.yaml\n/other/b.yaml", int64(-1), int64(-1))
	f.Add("x", 2, 1, "X=$$", "a/b=", "k=", "k:", "nvidia.com/mig-1g.10gb=2", "", "", "0", "/specs/..x", int64(0), int64(time.Second))
	f.Add("r", 1, 1, "", "", "", "", "rdma/ib=", "", "", "", "", int64(-1), int64(1500*time.Millisecond))
	f.Fuzz(func(t *testing.T, name string, nodes, gpus int, env, labels, nodeSel, tols, res, cpu, mem, shm, files string, ttl, deadline int64) {
		s := validSpec()
		s.Name, s.Nodes, s.GPUs = name, nodes, gpus
		s.CPU, s.Memory, s.ShmSize = cpu, mem, shm
		if ttl >= 0 {
			d := time.Duration(ttl)
			s.TTL = &d
		}
		if deadline >= 0 {
			d := time.Duration(deadline)
			s.Deadline = &d
		}
		var err error
		for _, p := range []struct {
			flag, raw string
			into      *[]KeyValue
		}{{"env", env, &s.Env}, {"label", labels, &s.Labels}, {"node-selector", nodeSel, &s.NodeSelector}, {"resource", res, &s.Resources}} {
			if *p.into, err = ParseKeyValues(p.flag, splitFlag(p.raw)); err != nil {
				return
			}
		}
		for _, raw := range splitFlag(tols) {
			tol, err := ParseToleration(raw)
			if err != nil {
				return
			}
			s.Tolerations = append(s.Tolerations, tol)
		}
		for _, p := range splitFlag(files) {
			s.Files = append(s.Files, File{Source: "f", ContainerPath: p, Data: []byte(p)})
		}
		if s.Validate() != nil {
			return
		}
		objs := Build(s)
		checkBuilt(t, s, objs)
	})
}

func checkBuilt(t *testing.T, s Spec, objs Objects) {
	t.Helper()
	job := objs.Job
	pod := job.Spec.Template.Spec
	for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels, pod.NodeSelector} {
		for k, v := range labels {
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				t.Fatalf("accepted spec built the label %q=%q", k, v)
			}
		}
	}
	for _, kv := range s.Labels {
		if job.Labels[kv.Key] != kv.Value {
			t.Fatalf("--label %s=%s: the Job has %q", kv.Key, kv.Value, job.Labels[kv.Key])
		}
	}
	for _, kv := range s.NodeSelector {
		if pod.NodeSelector[kv.Key] != kv.Value {
			t.Fatalf("--node-selector %s=%s: the pod has %q", kv.Key, kv.Value, pod.NodeSelector[kv.Key])
		}
	}
	c := pod.Containers[0]
	index := ""
	if s.MultiNode() {
		index = "0"
	}
	_, vars := kubeletEnv(c, index, func(corev1.EnvVar) string { return "" })
	for _, kv := range s.Env {
		if vars[kv.Key] != kv.Value {
			t.Fatalf("--env %s=%q arrives as %q", kv.Key, kv.Value, vars[kv.Key])
		}
	}
	for flag, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: s.CPU, corev1.ResourceMemory: s.Memory} {
		got, ok := c.Resources.Limits[flag]
		if want == "" {
			if ok {
				t.Fatalf("no --%s, but the limit is %s", flag, got.String())
			}
			continue
		}
		req := c.Resources.Requests[flag]
		if q := resource.MustParse(want); !ok || got.Cmp(q) != 0 || req.Cmp(q) != 0 {
			t.Fatalf("--%s %q: limit %s, request %s", flag, want, got.String(), req.String())
		}
	}
	for _, kv := range s.Resources {
		got, ok := c.Resources.Limits[corev1.ResourceName(kv.Key)]
		if !ok || got.Cmp(resource.MustParse(kv.Value)) != 0 || got.MilliValue()%1000 != 0 || got.Sign() <= 0 {
			t.Fatalf("--resource %s=%s: limit %s", kv.Key, kv.Value, got.String())
		}
	}
	if s.TTL != nil && time.Duration(*job.Spec.TTLSecondsAfterFinished)*time.Second != *s.TTL {
		t.Fatalf("--ttl %s: ttlSecondsAfterFinished %d", s.TTL, *job.Spec.TTLSecondsAfterFinished)
	}
	if s.Deadline != nil && *job.Spec.ActiveDeadlineSeconds < 1 {
		t.Fatalf("--deadline %s: activeDeadlineSeconds %d", s.Deadline, *job.Spec.ActiveDeadlineSeconds)
	}
	for _, obj := range objs.Children {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			for k := range cm.Data {
				if msgs := validation.IsConfigMapKey(k); len(msgs) > 0 {
					t.Fatalf("--file: ConfigMap key %q: %v", k, msgs)
				}
			}
		}
	}
	// Everything survives the JSON the API server reads.
	for _, obj := range objs.All() {
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatalf("marshal %T: %v", obj, err)
		}
		back := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(runtime.Object)
		if err := json.Unmarshal(data, back); err != nil {
			t.Fatalf("unmarshal %T: %v", obj, err)
		}
		if !apiequality.Semantic.DeepEqual(obj, back) {
			t.Fatalf("%T does not survive JSON:\n%s", obj, data)
		}
	}
}

func FuzzValidateGPUResource(f *testing.F) {
	for _, s := range []string{
		"", "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb.shared",
		"nvidia.com/mig-", "nvidia.com/hostdev", "amd.com/gpu", "nvidia.com/mig-1g 10gb", "kubernetes.io/mig-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateGPUResource(corev1.ResourceName(name))
		if err != nil || name == "" {
			return
		}
		// An accepted name is an extended resource name the API server takes as a limit: a
		// qualified name in NVIDIA's domain, never one of Kubernetes' own.
		if msgs := validation.IsQualifiedName(name); len(msgs) > 0 {
			t.Fatalf("ValidateGPUResource accepted %q: %v", name, msgs)
		}
		if !strings.HasPrefix(name, "nvidia.com/") {
			t.Fatalf("ValidateGPUResource accepted %q, outside nvidia.com", name)
		}
		s := Spec{GPUs: 1, GPUResourceName: corev1.ResourceName(name)}
		if q := s.resources().Limits[corev1.ResourceName(name)]; q.Value() != 1 {
			t.Fatalf("--gpu-resource %q: limit %v, want 1", name, s.resources().Limits)
		}
	})
}
