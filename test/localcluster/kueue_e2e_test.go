//go:build e2e

package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// TestKueue: two clusters with Kueue side by side (each Kueue on ports of its own), the
// manager ready and reported by status, and down leaving no Kueue process behind.
func TestKueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var cfgs []Config
	for i := 0; i < 2; i++ {
		cfg := testCluster(t, 1, RealNodeOff, 0)
		cfg.Kueue = true
		if err := Up(ctx, cfg); err != nil {
			t.Fatalf("up --kueue (cluster %d): %v", i, err)
		}
		defer func() { _ = Down(context.Background(), cfg) }()
		cfgs = append(cfgs, cfg)
	}
	seen := map[int]bool{}
	for _, cfg := range cfgs {
		st, err := ReadState(cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Kueue == nil {
			t.Fatalf("state of %s records no Kueue", cfg.StateDir)
		}
		for _, p := range []int{st.Kueue.Health, st.Kueue.Metrics, st.Kueue.Webhook} {
			if seen[p] {
				t.Errorf("port %d used twice across the two clusters' Kueues", p)
			}
			seen[p] = true
		}
		if !httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", st.Kueue.Health)) {
			t.Errorf("Kueue of %s not ready", cfg.StateDir)
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
	if err := KueueUp(ctx, cfgs[0]); err != nil {
		t.Fatalf("kueue-up: %v", err)
	}

	kueueExe := KueueBinary().Path(cfgs[0].CacheDir)
	for _, cfg := range cfgs {
		if err := Down(ctx, cfg); err != nil {
			t.Fatalf("down: %v", err)
		}
		if left := findOurProcesses(cfg.StateDir, []string{kueueExe}, ReadProc); len(left) > 0 {
			t.Errorf("Kueue processes %v still run against %s after down", left, cfg.StateDir)
		}
	}
}
