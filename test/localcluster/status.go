package localcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Status prints the state of each component and of the nodes, and returns an error when the
// cluster is not fully up, so scripts can test it.
func Status(ctx context.Context, cfg Config, out io.Writer) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	kind, err := classifyDir(cfg.StateDir)
	if err != nil {
		return err
	}
	if kind != dirOurs {
		return fmt.Errorf("no cluster in %s", cfg.StateDir)
	}
	st, stErr := ReadState(cfg.StateDir)
	problems := printProcessStates(out, cfg.StateDir, componentOrder)
	if stErr != nil {
		fmt.Fprintf(out, "%-24s %v\n", "state", stErr)
		return fmt.Errorf("cluster in %s is not up: %w", cfg.StateDir, stErr)
	}
	if st.Kueue != nil {
		problems += printProcessStates(out, cfg.StateDir, []string{CompKueue})
	}
	rc, err := RESTConfig(KubeconfigPath(cfg.StateDir))
	if err != nil {
		return err
	}
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	total, ready, err := CountReadyNodes(ctx, cs)
	if err != nil {
		fmt.Fprintf(out, "%-24s unreachable: %v\n", "api", err)
		problems++
	} else {
		fmt.Fprintf(out, "%-24s https://127.0.0.1:%d (Kubernetes %s)\n", "api", st.Ports.APIServer, st.kubeVersion())
		fmt.Fprintf(out, "%-24s %d/%d Ready (%d nvidia.com/gpu each)\n", "nodes", ready, total, st.GPUsPerNode)
		if ready != st.Nodes || total != st.Nodes {
			problems++
		}
	}
	if info, ok := readNodeInfo(realNodeFile(cfg.StateDir)); ok {
		problems += realNodeStatus(ctx, out, cs, info)
	} else if env, err := os.ReadFile(filepath.Join(cfg.StateDir, RealNodeEnvFile)); err == nil {
		fmt.Fprintf(out, "%-24s none (%s)\n", "real node", envValue(string(env), "TAO_REAL_NODE_SKIP"))
	}
	fmt.Fprintf(out, "%-24s %s\n", "kubeconfig", KubeconfigPath(cfg.StateDir))
	if problems > 0 {
		return fmt.Errorf("cluster in %s is not healthy (%d problems); `localcluster up` cleans up and restarts it", cfg.StateDir, problems)
	}
	return nil
}

// realNodeStatus prints the real node's processes, readiness, addresses and images, and
// returns the number of problems.
func realNodeStatus(ctx context.Context, out io.Writer, cs kubernetes.Interface, info RealNodeInfo) int {
	problems := printProcessStates(out, info.StateDir, realNodeProcesses)
	state := "not registered"
	if node, err := cs.CoreV1().Nodes().Get(ctx, info.Name, metav1.GetOptions{}); err == nil {
		gpus := node.Status.Allocatable[GPUResource]
		has := fmt.Sprintf("%d nvidia.com/gpu", gpus.Value())
		if info.MIGSlices > 0 {
			slices := node.Status.Allocatable[MIGResource]
			has += fmt.Sprintf(", %d %s", slices.Value(), MIGResource)
		}
		state = "NotReady (" + has + ")"
		if nodeReady(node) {
			state = "Ready (" + has + ")"
		}
	}
	if !strings.HasPrefix(state, "Ready") {
		problems++
	}
	fmt.Fprintf(out, "%-24s %s %s, IP %s on bridge %s (%s)\n", "real node", info.Name, state, info.Gateway, info.Bridge, info.Subnet)
	roles := make([]string, 0, len(info.Images))
	for r := range info.Images {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, r := range roles {
		fmt.Fprintf(out, "%-24s %s\n", "image "+r, info.Images[r])
	}
	for r, why := range info.ImagesUnavailable {
		fmt.Fprintf(out, "%-24s none (%s)\n", "image "+r, why)
	}
	return problems
}

// envValue reads KEY='value' from a realnode.env file.
func envValue(env, key string) string {
	for _, line := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
			return strings.ReplaceAll(v, `'\''`, "'")
		}
	}
	return ""
}
