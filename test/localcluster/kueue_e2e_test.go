//go:build e2e

package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
)

// TestKueue: two clusters with Kueue side by side (each Kueue on ports of its own), the
// manager ready and reported by status, and down leaving no Kueue process behind.
func TestKueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var cfgs []Config
	// Only the clusters the test did not take down itself are taken down at its end: a skip's
	// reason must be the test's last log line (the summary reads it there).
	down := map[string]bool{}
	defer func() {
		for _, cfg := range cfgs {
			if !down[cfg.StateDir] {
				_ = Down(context.Background(), cfg)
			}
		}
	}()
	for i := 0; i < 2; i++ {
		cfg := testCluster(t, 1, RealNodeOff, 0)
		cfg.Kueue = true
		if err := Up(ctx, cfg); err != nil {
			t.Fatalf("up --kueue (cluster %d): %v", i, err)
		}
		cfgs = append(cfgs, cfg)
	}
	seen := map[int]bool{}
	// Kueue keeps its visibility API's certificate in /visibility, a path it hard-codes: a
	// launcher that is not root runs Kueue without that API, and this test then checks the rest
	// and is reported skipped, naming why. As root the API must be there.
	noVisibility := false
	for _, cfg := range cfgs {
		st, err := ReadState(cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Kueue == nil {
			t.Fatalf("state of %s records no Kueue", cfg.StateDir)
		}
		for _, p := range []int{st.Kueue.Health, st.Kueue.Metrics, st.Kueue.Webhook, st.Kueue.Visibility} {
			if p == 0 && os.Geteuid() != 0 {
				continue // no visibility server
			}
			if seen[p] {
				t.Errorf("port %d used twice across the two clusters' Kueues", p)
			}
			seen[p] = true
		}
		if !httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", st.Kueue.Health)) {
			t.Errorf("Kueue of %s not ready", cfg.StateDir)
		}
		if st.Kueue.Visibility == 0 && os.Geteuid() != 0 {
			noVisibility = true
		} else if st.Kueue.Visibility == 0 {
			t.Errorf("Kueue of %s runs without its visibility API (is /visibility writable?)", cfg.StateDir)
		} else if err := visibilityAnswers(ctx, cfg); err != nil {
			t.Errorf("visibility API of %s: %v", cfg.StateDir, err)
		}
		var out bytes.Buffer
		if err := Status(ctx, cfg, &out); err != nil {
			t.Errorf("status: %v\n%s", err, out.String())
		}
		if !bytes.Contains(out.Bytes(), []byte(CompKueue)) || !bytes.Contains(out.Bytes(), []byte("running")) {
			t.Errorf("status does not show Kueue running:\n%s", out.String())
		}
	}

	// kueue-down takes Kueue off a running cluster; kueue-up puts it back.
	if err := KueueDown(ctx, cfgs[0]); err != nil {
		t.Fatalf("kueue-down: %v", err)
	}
	if componentRunning(cfgs[0].StateDir, CompKueue) {
		t.Error("Kueue still runs after kueue-down")
	}
	// Its APIService goes too: left behind, every client's discovery would report it failing.
	if err := visibilityAnswers(ctx, cfgs[0]); !apierrors.IsNotFound(err) {
		t.Errorf("visibility API after kueue-down: %v, want it not served (NotFound)", err)
	}
	if err := KueueUp(ctx, cfgs[0]); err != nil {
		t.Fatalf("kueue-up: %v", err)
	}
	if err := visibilityAnswers(ctx, cfgs[0]); err != nil && !noVisibility {
		t.Errorf("visibility API after kueue-up: %v", err)
	}

	kueueExe := KueueBinary().Path(cfgs[0].CacheDir)
	for _, cfg := range cfgs {
		if err := Down(ctx, cfg); err != nil {
			t.Fatalf("down: %v", err)
		}
		down[cfg.StateDir] = true
		if left := findOurProcesses(cfg.StateDir, []string{kueueExe}, ReadProc); len(left) > 0 {
			t.Errorf("Kueue processes %v still run against %s after down", left, cfg.StateDir)
		}
	}
	if noVisibility {
		t.Skip("Kueue's visibility API (queue positions): needs root, Kueue keeps its certificate in /visibility; the rest of Kueue passed")
	}
}

// visibilityAnswers checks that the cluster's apiserver serves Kueue's visibility API and routes
// it to this cluster's Kueue: discovery lists the pending workloads of LocalQueues, and a
// LocalQueue the manager does not know is its own NotFound. nil when both hold; the discovery
// error (NotFound: not served) otherwise.
func visibilityAnswers(ctx context.Context, cfg Config) error {
	rc, err := RESTConfig(KubeconfigPath(cfg.StateDir))
	if err != nil {
		return err
	}
	rc.ContentType, rc.AcceptContentTypes = "application/json", "application/json"
	cs := kubernetes.NewForConfigOrDie(rc)
	list, err := cs.Discovery().ServerResourcesForGroupVersion(visibilityGroup + "/" + visibilityVersion)
	if err != nil {
		return err
	}
	served := false
	for _, r := range list.APIResources {
		served = served || r.Name == "localqueues/pendingworkloads"
	}
	if !served {
		return fmt.Errorf("discovery of %s/%s lists no localqueues/pendingworkloads: %v", visibilityGroup, visibilityVersion, list.APIResources)
	}
	err = cs.Discovery().RESTClient().Get().AbsPath("/apis", visibilityGroup, visibilityVersion, "namespaces", "default", "localqueues", "none", "pendingworkloads").Do(ctx).Error()
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `localqueue.visibility.kueue.x-k8s.io "none" not found`) {
		return fmt.Errorf("pending workloads of an unknown LocalQueue: %v, want Kueue's NotFound", err)
	}
	return nil
}
