package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Paths inside the state directory.
const (
	markerFile     = ".localcluster"
	stateFile      = "state.json"
	KubeconfigFile = "kubeconfig"
)

// State is what a running cluster records about itself in <state>/state.json, so status,
// down and restart-kwok work from any later process.
type State struct {
	Ports       Ports             `json:"ports"`
	Nodes       int               `json:"nodes"`
	GPUsPerNode int               `json:"gpusPerNode"`
	Binaries    map[string]string `json:"binaries"`
	StartedAt   time.Time         `json:"startedAt"`
	// Kueue holds the ports of Kueue's manager, nil when the cluster runs without it.
	Kueue *KueuePorts `json:"kueue,omitempty"`
	// KubernetesVersion is the release the cluster runs; empty in a state written before
	// versions were recorded, which ran the default.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}

// kubeVersion is the release the cluster runs.
func (st State) kubeVersion() KubeVersion {
	if v, err := parseKubeVersion(st.KubernetesVersion); err == nil {
		return v
	}
	return DefaultKubeVersion()
}

// runningKubeVersion is the release of the cluster in stateDir, the default where unknown.
func runningKubeVersion(stateDir string) KubeVersion {
	st, err := ReadState(stateDir)
	if err != nil {
		return DefaultKubeVersion()
	}
	return st.kubeVersion()
}

func writeState(stateDir string, st State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode cluster state: %w", err)
	}
	tmp := filepath.Join(stateDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write cluster state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(stateDir, stateFile)); err != nil {
		return fmt.Errorf("write cluster state: %w", err)
	}
	return nil
}

// ReadState reads <state>/state.json.
func ReadState(stateDir string) (State, error) {
	var st State
	data, err := os.ReadFile(filepath.Join(stateDir, stateFile))
	if err != nil {
		return st, fmt.Errorf("read cluster state: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("parse %s: %w", filepath.Join(stateDir, stateFile), err)
	}
	return st, nil
}

// dirKind classifies a state directory before up or down touches it.
type dirKind int

const (
	dirAbsent  dirKind = iota // nothing there
	dirEmpty                  // exists, empty: ours to use
	dirOurs                   // has our marker
	dirForeign                // has other files: never delete it
)

func classifyDir(dir string) (dirKind, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return dirAbsent, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read state directory %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return dirEmpty, nil
	}
	if _, err := os.Stat(filepath.Join(dir, markerFile)); err == nil {
		return dirOurs, nil
	}
	return dirForeign, nil
}

func writeMarker(dir string) error {
	const text = "State of a kubectl-tao local cluster (test/localcluster). Remove it with `localcluster down`, which also stops its processes.\n"
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(text), 0o644); err != nil {
		return fmt.Errorf("mark state directory: %w", err)
	}
	return nil
}
