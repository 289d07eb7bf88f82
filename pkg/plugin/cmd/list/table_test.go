package list_test

import (
	"time"

	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/list"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// STATUS of a queued job carries its LocalQueue position where Kueue's visibility API told it
// (1-based: Kueue's 0 is next), and stays plain Queued where it did not.
func TestTableQueuedPosition(t *testing.T) {
	queued := func(name, uid string) batchv1.Job {
		j := fixture.Job(name).Namespace("ml").Created(now.Add(-time.Minute)).Nodes(2).Container(tao("8")).
			Label(jobstatus.QueueLabel, "team-a").Suspend(true).Obj()
		j.UID = types.UID(uid)
		return *j
	}
	jobs := []batchv1.Job{queued("next", "u1"), queued("after", "u2"), queued("unknown", "u3"), queued("no-workload", "u4")}
	wls := map[types.UID]*jobstatus.Workload{
		"u1": {Name: "job-next", Position: &jobstatus.Position{LocalQueue: 0, ClusterQueue: 2}},
		"u2": {Name: "job-after", Position: &jobstatus.Position{LocalQueue: 1, ClusterQueue: 3}},
		"u3": {Name: "job-unknown"},
	}
	want := []string{"Queued:1", "Queued:2", "Queued", "Queued"}
	table := list.Table(jobs, wls, now)
	for i, row := range table.Rows {
		if got := row.Cells[1]; got != want[i] {
			t.Errorf("%s: STATUS %v, want %s", jobs[i].Name, got, want[i])
		}
	}
}
