package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FaultComponents are the components `localcluster stop|start|restart COMPONENT` act on: the
// control plane and kwok, each restartable on its own because every one of them keeps its
// state outside its process (etcd's data dir, the PKI, the ports in state.json).
var FaultComponents = []string{CompEtcd, CompAPIServer, CompControllerManager, CompScheduler, CompKwok}

// ComponentAction is what StopComponent, StartComponent and RestartComponent do.
type ComponentAction string

const (
	ActionStop    ComponentAction = "stop"
	ActionStart   ComponentAction = "start"
	ActionRestart ComponentAction = "restart"
)

// ParseComponent checks that name is one of FaultComponents.
func ParseComponent(name string) (string, error) {
	if !slices.Contains(FaultComponents, name) {
		return "", fmt.Errorf("unknown component %q: want one of %s", name, strings.Join(FaultComponents, ", "))
	}
	return name, nil
}

// ControlComponent stops, starts or restarts one component of the running cluster in
// cfg.StateDir, with the ports, certificates and data it had: a fault a test injects, or a
// user by hand (`localcluster restart kube-apiserver`). Start and restart return once the
// component is healthy again (kwok: once every node is Ready). Starting a component that runs
// does nothing; stopping one that does not run does nothing.
func ControlComponent(ctx context.Context, cfg Config, action ComponentAction, name string) error {
	if _, err := ParseComponent(name); err != nil {
		return err
	}
	// The same steps as the other commands that change a running cluster: its state lock, its
	// state, its clients.
	return onRunning(ctx, cfg, func(c *cluster, _ *clients, st *State) error {
		c.cfg.Nodes = st.Nodes
		switch action {
		case ActionStop:
			c.stopComponent(name)
			return nil
		case ActionStart:
			return c.startComponent(ctx, name)
		case ActionRestart:
			c.stopComponent(name)
			return c.startComponent(ctx, name)
		}
		return fmt.Errorf("unknown action %q: want stop, start or restart", action)
	})
}

// RestartKwok restarts only kwok (`localcluster restart-kwok`, the older spelling of
// `localcluster restart kwok`).
func RestartKwok(ctx context.Context, cfg Config) error {
	return ControlComponent(ctx, cfg, ActionRestart, CompKwok)
}

// runningPid returns the pid of name when it runs and is ours.
func (c *cluster) runningPid(name string) (int, bool) {
	byName, _ := pidRecordsByName(c.cfg.StateDir)
	r, ok := byName[name]
	if !ok {
		return 0, false
	}
	info, alive := ReadProc(r.PID)
	if !alive || !IsOurs(info, r.Exe, c.cfg.StateDir) {
		return 0, false
	}
	return r.PID, true
}

// stopComponent stops name (SIGTERM, then SIGKILL after the grace) and leaves its pid file,
// so status shows it as not running until it is started again.
func (c *cluster) stopComponent(name string) {
	if pid, ok := c.runningPid(name); ok {
		c.cfg.logf("stopping %s (pid %d)", name, pid)
		stopPid(pid, componentStopGrace, ReadProc)
	}
}

// startComponent starts name with the flags it had and waits until it is healthy.
func (c *cluster) startComponent(ctx context.Context, name string) error {
	if pid, ok := c.runningPid(name); ok {
		c.cfg.logf("%s already runs (pid %d)", name, pid)
		return nil
	}
	admin, err := c.clients(KubeconfigPath(c.cfg.StateDir))
	if err != nil {
		return err
	}
	if name == CompKwok {
		// The node leases name the old kwok as holder: the new one could not take them over
		// before they expire, and pods would sit unattended for minutes.
		leases := admin.cs.CoordinationV1().Leases("kube-node-lease")
		for i := 0; i < c.cfg.Nodes; i++ {
			if err := leases.Delete(ctx, NodeName(i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete lease of node %s: %w", NodeName(i), err)
			}
		}
	}
	// The component comes back on the port it had (kubeconfigs and the other components' flags
	// name it), and that port is in the kernel's ephemeral range (PickPorts takes what listen
	// on :0 gives), so while the component is down another socket can hold it for a moment: a
	// client redialing it may be handed the very port as its source and connect to itself
	// until Go's dialer notices. Start again rather than fail. (The restart failure CI showed
	// was another cause, a stop that returned before the old process had let go of its
	// sockets; stopPid now waits for that, see exitedWhole.)
	for attempt := 1; ; attempt++ {
		err := c.startOnce(ctx, name, admin)
		var inUse *portInUseError
		if err == nil || !errors.As(err, &inUse) || attempt == restartPortAttempts {
			return err
		}
		c.cfg.logf("%s could not bind its port (in use for a moment); starting it again", name)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(restartPortPause):
		}
	}
}

// restartPortAttempts and restartPortPause bound startComponent's retries when the component's
// own port is held: 10 tries over about 5 s.
const (
	restartPortAttempts = 10
	restartPortPause    = 500 * time.Millisecond
)

// startOnce starts name once and waits until it is healthy; a portInUseError when it died
// because its port was taken.
func (c *cluster) startOnce(ctx context.Context, name string, admin *clients) error {
	c.cfg.logf("starting %s", name)
	p, err := c.start(name)
	if err != nil {
		return err
	}
	switch name {
	case CompEtcd:
		url := fmt.Sprintf("http://127.0.0.1:%d/health", c.ports.EtcdClient)
		return c.waitFor(ctx, "etcd /health", componentStartupTimeout, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, url), nil
		}, p)
	case CompAPIServer:
		return c.waitFor(ctx, "kube-apiserver /readyz", componentStartupTimeout, func(ctx context.Context) (bool, error) {
			_, err := admin.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err == nil, nil
		}, p)
	case CompControllerManager, CompScheduler:
		port := c.ports.ControllerManager
		if name == CompScheduler {
			port = c.ports.Scheduler
		}
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
		return c.waitFor(ctx, name+" /healthz", componentStartupTimeout, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, url), nil
		}, p)
	default: // kwok
		return c.waitReady(ctx, admin, p)
	}
}
