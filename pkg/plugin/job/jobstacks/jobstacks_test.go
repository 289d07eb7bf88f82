package jobstacks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// fakeExec answers the stage stacks exec per pod, and records what was run.
type fakeExec struct {
	mu  sync.Mutex
	ran []string
	out map[string]string
	err map[string]error
}

func (f *fakeExec) Exec(_ context.Context, ns, pod, container string, command []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ran = append(f.ran, ns+"/"+pod+"/"+container+": "+strings.Join(command, " "))
	return []byte(f.out[pod]), f.err[pod]
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// job is a 3-rank job whose container runs the supervisor when supervised.
func job(supervised bool) *fixture.JobWrapper {
	c := corev1.Container{Name: jobspec.ContainerName, Image: "img"}
	if supervised {
		c.Env = []corev1.EnvVar{{Name: jobspec.EnvStager, Value: s3layout.StagerBinary}}
	}
	return fixture.Job("ddp").Namespace("ml").UID("u").DefaultSelector().Indexed().Completions(3).Container(c)
}

// Every running rank's stacks, one exec each in the training container; a rank that is not
// running says why instead.
func TestCollect(t *testing.T) {
	j := job(true).Obj()
	client := fake.NewClientset(j,
		fixture.RankPod(j, 0).Name("ddp-0-a").Node("n0").Running(t0).Obj(),
		fixture.RankPod(j, 1).Name("ddp-1-a").Node("n1").Running(t0).Obj(),
		fixture.RankPod(j, 2).Name("ddp-2-a").Node("n1").Succeeded(t0).Obj())
	ex := &fakeExec{out: map[string]string{"ddp-0-a": "--- process 12 (python train.py), by faulthandler ---\n  File \"train.py\"\n"},
		err: map[string]error{"ddp-1-a": errors.New("command terminated with non-zero exit code: no Python process of the command could dump its stacks")}}
	got, err := Collect(context.Background(), client, ex, "ml", "ddp", -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Pod != "ddp-0-a" || got[0].Node != "n0" || !strings.Contains(got[0].Stacks, "by faulthandler") ||
		got[1].Error != "no Python process of the command could dump its stacks" ||
		got[2].Pod != "" || !strings.Contains(got[2].Error, "rank 2 of job.batch/ddp is not running") {
		t.Errorf("got %+v", got)
	}
	slices.Sort(ex.ran)
	if want := []string{"ml/ddp-0-a/tao: " + s3layout.StagerBinary + " stage stacks", "ml/ddp-1-a/tao: " + s3layout.StagerBinary + " stage stacks"}; !slices.Equal(ex.ran, want) {
		t.Errorf("ran %q, want %q", ex.ran, want)
	}

	// One rank that is not running fails as logs does for a gone pod.
	if _, err := Collect(context.Background(), client, ex, "ml", "ddp", 2); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("a finished rank: %v", err)
	}
	if _, err := Collect(context.Background(), client, ex, "ml", "ddp", 7); exitcode.Of(err) != exitcode.NotFound {
		t.Errorf("no rank 7: %v (exit %d)", err, exitcode.Of(err))
	}
	if _, err := Collect(context.Background(), client, ex, "ml", "gone", -1); exitcode.Of(err) != exitcode.NotFound {
		t.Errorf("no job: %v", err)
	}
}

// A job without the supervisor has nobody to take the stacks: it is said, nothing is exec'd.
func TestCollectUnsupervised(t *testing.T) {
	j := job(false).Obj()
	client := fake.NewClientset(j, fixture.RankPod(j, 0).Name("ddp-0-a").Running(t0).Obj())
	ex := &fakeExec{}
	_, err := Collect(context.Background(), client, ex, "ml", "ddp", -1)
	if err == nil || !strings.Contains(err.Error(), "does not run under kubectl-tao's supervisor") || len(ex.ran) != 0 {
		t.Errorf("%v, ran %q", err, ex.ran)
	}
}
