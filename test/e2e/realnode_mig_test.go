//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster"
	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

// TestRealNodeMIGSlice runs a rank on a MIG slice of the real node, a node of the MIG mixed
// strategy (`make e2e` starts it with --real-node-mig-slices): submit --gpu-resource takes it
// there, the kubelet gives it a slice through the device plugin, and `top` reads that slice's
// engine activity and memory from the dcgm-exporter stand-in by the exporter's pod and MIG
// labels, while capacity shows the node's slices in a column of their own.
func TestRealNodeMIGSlice(t *testing.T) {
	n := realNode(t)
	if n.MIGSlices == 0 {
		reason := "the real node has no MIG slices (TAO_REAL_NODE_MIG_SLICES=0): `make e2e` starts it with REAL_NODE_MIG_SLICES (default 2)"
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	stateDir := os.Getenv("LOCALCLUSTER_STATE_DIR")
	if stateDir == "" {
		t.Fatal("LOCALCLUSTER_STATE_DIR must be set (make e2e sets it): the test sets what the node's slices show")
	}
	t.Parallel()
	// Before namespace: its cleanup, which waits for the rank's pod to go, runs before the
	// unlock, so test/localcluster's exporter test never sees the slice held.
	lockExporter(t, stateDir, false)
	ns, job := namespace(t), "slice"
	resource := string(localcluster.MIGResource)

	node, err := client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices, gpus := node.Status.Allocatable[localcluster.MIGResource], node.Status.Allocatable[localcluster.GPUResource]
	if slices.Value() != int64(n.MIGSlices) || gpus.Value() != localcluster.RealNodeGPUs {
		t.Fatalf("the real node advertises %s %s and %s nvidia.com/gpu, want %d and %d", slices.String(), resource, gpus.String(), n.MIGSlices, localcluster.RealNodeGPUs)
	}

	submitReal(t, n, ns, job, []string{"--gpus", "1", "--gpu-resource", resource, "--shm-size", "0"}, `trap 'exit 0' TERM
echo "devices=$NVIDIA_VISIBLE_DEVICES"
while :; do echo tick; sleep 1; done`)
	var pods map[int]string
	poll(t, 90*time.Second, "the rank's pod", func(context.Context) (bool, error) {
		pods = rankPods(t, ns, job)
		return len(pods) == 1, nil
	})
	if err := localcluster.SetGPUMetrics(stateDir, ns, pods[0], localcluster.GPUMetrics{Util: 64, MemUsedMiB: 2000}); err != nil {
		t.Fatal(err)
	}

	j, r := topUntil(t, ns, job, nil, func(j topJob) bool { return j.Status == "Running" && j.util(0) == 64 })
	if j.MetricsSource != "dcgm-exporter" || j.GPUs != 1 || j.GPUResource != resource || len(j.Ranks) != 1 {
		t.Fatalf("want a Running job of 1 %s read from dcgm-exporter, got %s", resource, r)
	}
	rk := j.Ranks[0]
	if rk.Node != n.Name || rk.Pod != pods[0] || rk.MetricsSource != "dcgm-exporter" || len(rk.GPUs) != 1 {
		t.Fatalf("want rank 0's pod %s on %s with one slice from dcgm-exporter, got %s", pods[0], n.Name, r)
	}
	g := rk.GPUs[0]
	migGPU := localcluster.MIGGPUID(stateDir, localcluster.RealNodeGPUs)
	if g.UUID != migGPU || g.MIGProfile != localcluster.MIGProfile || g.MIGInstance == "" {
		t.Fatalf("want a %s slice of the node's GPU in MIG mode %s, got %s", localcluster.MIGProfile, migGPU, r)
	}
	// The slice top read is the one the kubelet gave the rank: its MIG UUID, from the
	// instance, is what the device plugin put in NVIDIA_VISIBLE_DEVICES.
	instance, err := strconv.Atoi(g.MIGInstance)
	if err != nil {
		t.Fatalf("migInstance %q: %v", g.MIGInstance, err)
	}
	var given string
	poll(t, 30*time.Second, "the rank's devices line", func(context.Context) (bool, error) {
		for _, l := range jobLogs(t, ns, job)[0] {
			if d, ok := strings.CutPrefix(l, "devices="); ok {
				given = d
				return true, nil
			}
		}
		return false, nil
	})
	if want := gpustandin.MIGDeviceID(migGPU, instance); given != want {
		t.Errorf("the rank was given %q, but top read instance %d, whose MIG UUID is %s", given, instance, want)
	}
	if g.MemoryUsedBytes == nil || *g.MemoryUsedBytes != 2000<<20 || g.MemoryTotalBytes == nil || *g.MemoryTotalBytes != 9983<<20 {
		t.Errorf("the slice's memory: want 2000 of its own 9983 MiB, got %s", r)
	}
	if r.stderr != "" {
		t.Errorf("top with the exporter at hand warned: %s", r)
	}

	// The human views: the job's line says what GPU means for slices, -o wide names the slice.
	contains(t, tao(t, nil, "top", job, "-n", ns), 0, "GPUs: "+resource+", MIG slices", " 64%")
	contains(t, tao(t, nil, "top", job, "-n", ns, "-o", "wide"), 0, localcluster.MIGProfile+"/"+g.MIGInstance)
	contains(t, tao(t, nil, "list", "-n", ns), 0, "1x1")

	// capacity: the node's whole GPUs as before, its slices in a column of their own, the
	// rank's one requested.
	c := tao(t, nil, "capacity", "-o", "json")
	var rep struct {
		Nodes []struct {
			Name              string
			Allocatable       int64
			OtherGPUResources map[string]struct{ Allocatable, Requested, Free int64 } `json:"otherGPUResources"`
		}
	}
	if c.code != 0 || json.Unmarshal([]byte(c.stdout), &rep) != nil {
		t.Fatalf("capacity -o json: %s", c)
	}
	found := false
	for _, row := range rep.Nodes {
		if row.Name != n.Name {
			continue
		}
		found = true
		s := row.OtherGPUResources[resource]
		if row.Allocatable != localcluster.RealNodeGPUs || s.Allocatable != int64(n.MIGSlices) || s.Requested != 1 || s.Free != int64(n.MIGSlices-1) {
			t.Errorf("capacity of %s: want %d whole GPUs and %d slices, 1 requested; got %s", n.Name, localcluster.RealNodeGPUs, n.MIGSlices, c)
		}
	}
	if !found {
		t.Fatalf("capacity -o json has no row of %s: %s", n.Name, c)
	}
	table := tao(t, nil, "capacity")
	contains(t, table, 0, "MIG-1G.10GB")
	for _, l := range strings.Split(table.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == n.Name && !strings.Contains(l, fmt.Sprintf(" %d/%d", n.MIGSlices-1, n.MIGSlices)) {
			t.Errorf("capacity's row of %s lacks its slices, %d/%d free: %q", n.Name, n.MIGSlices-1, n.MIGSlices, l)
		}
	}
}
