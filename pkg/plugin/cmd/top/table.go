package top

import (
	"fmt"
	"math"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/gpumetrics"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobtop"
)

// ranksTable is one row per rank; -o wide: one row per GPU, with its UUID and the extra fields.
func (o *Options) ranksTable(j jobtop.Job, now time.Time) *metav1.Table {
	cols := []metav1.TableColumnDefinition{
		{Name: "Rank", Type: "integer"},
		{Name: "Pod", Type: "string", Format: "name"},
		{Name: "Node", Type: "string"},
		{Name: "GPU", Type: "string"},
		{Name: "GPU Mem", Type: "string"},
		{Name: "Last Output", Type: "string"},
		{Name: "Attempt", Type: "integer"},
	}
	if o.out.Wide() {
		cols = append(cols,
			metav1.TableColumnDefinition{Name: "UUID", Type: "string", Priority: 1},
			metav1.TableColumnDefinition{Name: "MIG", Type: "string", Priority: 1},
			metav1.TableColumnDefinition{Name: "Tensor", Type: "string", Priority: 1},
			metav1.TableColumnDefinition{Name: "Xid", Type: "string", Priority: 1},
			metav1.TableColumnDefinition{Name: "Source", Type: "string", Priority: 1},
		)
	}
	// The sparkline is last: its block characters count as several columns each (see bar).
	if o.Watch {
		cols = append(cols, metav1.TableColumnDefinition{Name: "History", Type: "string"})
	}
	t := &metav1.Table{ColumnDefinitions: cols}
	for _, rk := range j.Ranks {
		last := "-"
		if rk.LastOutputTime != nil {
			last = cmdutil.Age(*rk.LastOutputTime, now) + " ago"
		}
		if rk.Phase != "Running" {
			last = rk.Phase
		}
		row := func(gpus []gpumetrics.GPU, wide ...any) metav1.TableRow {
			cells := append([]any{rk.Rank, rk.Pod, orDash(rk.Node), utilCell(gpus, j.SharedGPU), memCell(gpus), last, rk.Attempt}, wide...)
			if o.Watch {
				cells = append(cells, sparkline(o.history.of(j.Namespace, j.Job, rk.Rank)))
			}
			return metav1.TableRow{Cells: cells}
		}
		switch {
		case !o.out.Wide():
			t.Rows = append(t.Rows, row(rk.GPUs))
		case len(rk.GPUs) == 0:
			t.Rows = append(t.Rows, row(nil, "-", "-", "-", "-", rk.MetricsSource))
		default:
			for _, g := range rk.GPUs {
				xid := "-"
				if g.Xid != nil {
					xid = fmt.Sprint(*g.Xid)
				}
				t.Rows = append(t.Rows, row([]gpumetrics.GPU{g}, g.UUID, migCell(g), pctCell(g.TensorActive), xid, rk.MetricsSource))
			}
		}
	}
	return t
}

// jobsTable is one row per running job.
func (o *Options) jobsTable(jobs []jobtop.Job) *metav1.Table {
	cols := []metav1.TableColumnDefinition{
		{Name: "Job", Type: "string", Format: "name"},
		{Name: "GPUs", Type: "integer"},
		{Name: "Util", Type: "string"},
		{Name: "Mem", Type: "string"},
		{Name: "Progress", Type: "string"},
		{Name: "ETA", Type: "string"},
		{Name: "Health", Type: "string"},
	}
	if o.AllNamespaces {
		cols = append([]metav1.TableColumnDefinition{{Name: "Namespace", Type: "string"}}, cols...)
	}
	t := &metav1.Table{ColumnDefinitions: cols}
	for _, j := range jobs {
		var gpus []gpumetrics.GPU
		for _, rk := range j.Ranks {
			gpus = append(gpus, rk.GPUs...)
		}
		prog, eta := "-", "-"
		if j.Progress != nil {
			prog = j.Progress.String()
			if e := j.Progress.ETAString(); e != "" {
				eta = e
			}
		}
		cells := []any{j.Job, j.GPUs, utilCell(gpus, j.SharedGPU), memCell(gpus), prog, eta, health(j)}
		if o.AllNamespaces {
			cells = append([]any{j.Namespace}, cells...)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells})
	}
	return t
}

// health is the HEALTH cell: ok, or the findings' names.
func health(j jobtop.Job) string {
	if len(j.Findings) == 0 {
		return "ok"
	}
	seen := map[string]bool{}
	var names []string
	for _, f := range j.Findings {
		if !seen[f.NodeEventName] {
			seen[f.NodeEventName] = true
			names = append(names, f.NodeEventName)
		}
	}
	return strings.Join(names, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// meanUtil is the mean utilisation of the GPUs that have a reading; ok is false without one.
func meanUtil(gpus []gpumetrics.GPU) (float64, bool) {
	var sum float64
	n := 0
	for _, g := range gpus {
		if g.Utilization != nil {
			sum += *g.Utilization
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// utilCell is the mean utilisation as a number and a small bar, "-" without a reading; on a
// shared GPU it says so, because the number is the whole GPU's and not the job's.
func utilCell(gpus []gpumetrics.GPU, shared bool) string {
	u, ok := meanUtil(gpus)
	if !ok {
		return "-"
	}
	cell := fmt.Sprintf("%3.0f%% %s", u, bar(u, 10))
	if shared {
		cell += " shared"
	}
	return cell
}

// migCell is a MIG slice's profile and GPU instance, "-" for a whole GPU.
func migCell(g gpumetrics.GPU) string {
	if g.MIGProfile == "" && g.MIGInstance == "" {
		return "-"
	}
	return g.MIGProfile + "/" + g.MIGInstance
}

func pctCell(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *v)
}

// memCell is the memory used over the total of the GPUs, in GiB.
func memCell(gpus []gpumetrics.GPU) string {
	var used, total int64
	n := 0
	for _, g := range gpus {
		if g.MemoryUsedBytes == nil || g.MemoryTotalBytes == nil {
			continue
		}
		used += *g.MemoryUsedBytes
		total += *g.MemoryTotalBytes
		n++
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1fGi", float64(used)/(1<<30), float64(total)/(1<<30))
}

// bar draws percent (0-100) in width ASCII cells: kubectl's table printer sizes columns by
// bytes, so block characters would pad every later column with blanks.
func bar(percent float64, width int) string {
	n := int(math.Round(math.Max(0, math.Min(100, percent)) / 100 * float64(width)))
	return strings.Repeat("#", n) + strings.Repeat(".", width-n)
}

// sparkBlocks are the eight heights of a sparkline; a missing reading is a space.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws a rank's recent mean utilisations, oldest first.
func sparkline(values []float64) string {
	if len(values) == 0 {
		return "-"
	}
	var b strings.Builder
	for _, v := range values {
		if math.IsNaN(v) {
			b.WriteRune(' ')
			continue
		}
		i := int(math.Round(math.Max(0, math.Min(100, v)) / 100 * float64(len(sparkBlocks)-1)))
		b.WriteRune(sparkBlocks[i])
	}
	return b.String()
}

// historyLen is how many readings a sparkline shows.
const historyLen = 20

// history keeps each rank's recent mean utilisation, across -w's readings: a point per new
// GPU reading, so that an exporter's reading served again between its collects is no trend.
type history struct {
	rounds int
	byRank map[string][]float64
}

func historyKey(ns, job string, rank int) string { return fmt.Sprintf("%s/%s/%d", ns, job, rank) }

func (h *history) add(j jobtop.Job) {
	if h.byRank == nil {
		h.byRank = map[string][]float64{}
	}
	for _, rk := range j.Ranks {
		if rk.RepeatedReading {
			continue
		}
		k := historyKey(j.Namespace, j.Job, rk.Rank)
		v := math.NaN()
		if u, ok := meanUtil(rk.GPUs); ok {
			v = u
		}
		s := append(h.byRank[k], v)
		if len(s) > historyLen {
			s = s[len(s)-historyLen:]
		}
		h.byRank[k] = s
	}
}

func (h *history) of(ns, job string, rank int) []float64 { return h.byRank[historyKey(ns, job, rank)] }
