package util

import (
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// PrintSummary writes s through out: the table (now is for AGE) or the -o format. The result
// names the Job, for -o name.
func PrintSummary(w io.Writer, out *printer.Flags, s jobstatus.Summary, now time.Time) error {
	if out.Human() {
		return out.PrintTable(w, SummaryTable(s, now))
	}
	return out.Print(w, s, "job.batch/"+s.Name)
}

// SummaryTable is the human view of s: one kubectl-style row.
func SummaryTable(s jobstatus.Summary, now time.Time) *metav1.Table {
	age := Age(s.Created(), now)
	gpus := "0"
	if s.GPUs > 0 {
		gpus = fmt.Sprintf("%dx%d", s.GPUs, s.Nodes)
	}
	return &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name"},
			{Name: "Status", Type: "string"},
			{Name: "GPUs", Type: "string"},
			{Name: "Ready", Type: "string"},
			{Name: "Succeeded", Type: "integer"},
			{Name: "Failed", Type: "integer"},
			{Name: "Age", Type: "string"},
			{Name: "Message", Type: "string"},
		},
		Rows: []metav1.TableRow{{Cells: []any{
			s.Name, s.Shown(), gpus, fmt.Sprintf("%d/%d", s.Ready, s.Nodes), s.Succeeded, s.Failed, age, s.Message,
		}}},
	}
}
