package localcluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

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
	recs, _ := readPidFiles(cfg.StateDir)
	byName := map[string]PidRecord{}
	for _, r := range recs {
		byName[r.Name] = r
	}
	problems := 0
	for _, name := range componentOrder {
		r, ok := byName[name]
		state := "no pid file"
		if ok {
			info, alive := ReadProc(r.PID)
			switch {
			case alive && IsOurs(info, r.Exe, cfg.StateDir):
				state = fmt.Sprintf("running (pid %d)", r.PID)
			default:
				state = fmt.Sprintf("not running (pid %d)", r.PID)
			}
		}
		if !strings.HasPrefix(state, "running") {
			problems++
		}
		fmt.Fprintf(out, "%-24s %s\n", name, state)
	}
	if stErr != nil {
		fmt.Fprintf(out, "%-24s %v\n", "state", stErr)
		return fmt.Errorf("cluster in %s is not up: %w", cfg.StateDir, stErr)
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
		fmt.Fprintf(out, "%-24s https://127.0.0.1:%d\n", "api", st.Ports.APIServer)
		fmt.Fprintf(out, "%-24s %d/%d Ready (%d nvidia.com/gpu each)\n", "nodes", ready, total, st.GPUsPerNode)
		if ready != st.Nodes || total != st.Nodes {
			problems++
		}
	}
	fmt.Fprintf(out, "%-24s %s\n", "kubeconfig", KubeconfigPath(cfg.StateDir))
	if problems > 0 {
		return fmt.Errorf("cluster in %s is not healthy (%d problems); `localcluster up` cleans up and restarts it", cfg.StateDir, problems)
	}
	return nil
}
