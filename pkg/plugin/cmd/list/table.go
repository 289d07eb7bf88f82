package list

import (
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// columns are list's table columns. Priority 1 columns appear only with -o wide.
var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Status", Type: "string"},
	{Name: "GPUs", Type: "string", Description: "GPUs per node x nodes"},
	{Name: "Nodes", Type: "string", Description: "ranks running / ranks wanted"},
	{Name: "Age", Type: "string"},
	{Name: "Image", Type: "string", Priority: 1},
	{Name: "Command", Type: "string", Priority: 1},
}

// Table renders jobs as kubectl renders a server-side table. The status comes from each Job's
// own counters and conditions (no pod list per Job) and, for jobs waiting in a Kueue queue,
// their Workloads in wls (by Job UID; nil when not read). Each row carries its Job, so the
// printer can add the NAMESPACE column and labels.
func Table(jobs []batchv1.Job, wls map[types.UID]*jobstatus.Workload, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: columns, Rows: make([]metav1.TableRow, 0, len(jobs))}
	for i := range jobs {
		t.Rows = append(t.Rows, Row(&jobs[i], wls[jobs[i].UID], now))
	}
	return t
}

// Row is one Job's table row; STATUS shows the reason where there is one (Queued,
// IncompleteSubmit, ...).
func Row(job *batchv1.Job, wl *jobstatus.Workload, now time.Time) metav1.TableRow {
	r := jobstatus.WithSubmit(jobstatus.WithWorkload(jobstatus.Of(job, nil), job, wl), job, now)
	age := cmdutil.Age(job.CreationTimestamp.Time, now)
	image, command := "", ""
	if cs := job.Spec.Template.Spec.Containers; len(cs) > 0 {
		image, command = cs[0].Image, UserCommand(cs[0].Command, cs[0].Args)
	}
	return metav1.TableRow{
		Cells: []any{
			job.Name, r.Shown(), jobstatus.GPUShape(job),
			r.Ranks(),
			age, image, command,
		},
		Object: runtime.RawExtension{Object: job},
	}
}

// UserCommand shows the command the user typed (jobspec.UserCommand) on one line: an argv with
// its elements quoted where a shell would split or expand them.
func UserCommand(command, args []string) string {
	parts, _ := jobspec.UserCommand(command, args)
	if len(parts) > 1 {
		for i, p := range parts {
			parts[i] = quote(p)
		}
	}
	// A table cell must stay on one line.
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(strings.Join(parts, " "))
}

// quote single-quotes an argv element when a shell would split or expand it, so the wide
// column reads like the command line that made it.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"$`\\;&|<>*?()[]{}#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
