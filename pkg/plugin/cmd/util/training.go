package util

import (
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobtop"
)

// TrainingReader is the one reader of a running job's training health that top and diagnose
// share: the factory's client, nvidia-smi and the progress file through pods/exec where the
// factory can stream to pods. Keep it for a whole top -w: it remembers the exporters it found
// and their last readings.
func TrainingReader(f Factory, silentAfter time.Duration, watching bool) (*jobtop.Reader, error) {
	client, err := f.KubernetesClient()
	if err != nil {
		return nil, err
	}
	r := &jobtop.Reader{Client: client, SilentAfter: silentAfter, Watching: watching}
	if cfg, err := CoreRESTConfig(f); err == nil {
		r.Exec = jobtop.RemoteExecutor{Client: client, Config: cfg}
	}
	return r, nil
}
