package capacity

import (
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/nodeusage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
)

// ProductLabel is the GPU model GPU Feature Discovery puts on a node.
const ProductLabel = "nvidia.com/gpu.product"

// Report is what `capacity -o json` prints. Field names are a contract with scripts.
type Report struct {
	Nodes []NodeRow `json:"nodes"`
	Total Total     `json:"total"`
	// Queues are Kueue's ClusterQueues with their GPU quota, only with --queues (the key is
	// absent without it, so the output scripts read today stays as it was).
	Queues *[]kueue.ClusterQueue `json:"queues,omitempty"`
}

// NodeRow is one node's GPUs. CPU, memory and pod counts feed -o wide only.
type NodeRow struct {
	Name        string `json:"name"`
	Product     string `json:"product"`
	Allocatable int64  `json:"allocatable"`
	Requested   int64  `json:"requested"`
	Free        int64  `json:"free"`

	cpuAlloc, cpuFree, memAlloc, memFree resource.Quantity
	pods                                 int
}

// Total sums the GPU columns over the nodes shown.
type Total struct {
	Allocatable int64 `json:"allocatable"`
	Requested   int64 `json:"requested"`
	Free        int64 `json:"free"`
}

// Row is one node's line. Requested can exceed allocatable (a node that shrank); free is then 0.
func Row(n *corev1.Node, u *nodeusage.Usage) NodeRow {
	var req corev1.ResourceList
	r := NodeRow{Name: n.Name, Product: n.Labels[ProductLabel]}
	if u != nil {
		req, r.pods = u.Requested, u.Pods
	}
	alloc := n.Status.Allocatable
	free := gpufit.Free(alloc, req)
	r.Allocatable = value(alloc, jobspec.GPUResource)
	r.Requested = value(req, jobspec.GPUResource)
	r.Free = value(free, jobspec.GPUResource)
	r.cpuAlloc, r.cpuFree = alloc[corev1.ResourceCPU], free[corev1.ResourceCPU]
	r.memAlloc, r.memFree = alloc[corev1.ResourceMemory], free[corev1.ResourceMemory]
	return r
}

func value(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q := l[name]
	return q.Value()
}

// Finish sorts the rows by name and totals them.
func Finish(rows []NodeRow) Report {
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	rep := Report{Nodes: rows}
	if rep.Nodes == nil {
		rep.Nodes = []NodeRow{}
	}
	for _, r := range rows {
		rep.Total.Allocatable += r.Allocatable
		rep.Total.Requested += r.Requested
		rep.Total.Free += r.Free
	}
	return rep
}

// Table renders the report for the table printer, with a TOTAL row last (node names are
// lower case, so it cannot be mistaken for a node).
func Table(rep Report) *metav1.Table {
	cols := []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"},
		{Name: "Product", Type: "string"},
		{Name: "Allocatable", Type: "integer"},
		{Name: "Requested", Type: "integer"},
		{Name: "Free", Type: "integer"},
		{Name: "CPU-Free", Type: "string", Priority: 1},
		{Name: "Memory-Free", Type: "string", Priority: 1},
		{Name: "Pods", Type: "integer", Priority: 1},
	}
	t := &metav1.Table{ColumnDefinitions: cols}
	for _, r := range rep.Nodes {
		product := r.Product
		if product == "" {
			product = "<none>"
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			r.Name, product, r.Allocatable, r.Requested, r.Free,
			r.cpuFree.String() + "/" + r.cpuAlloc.String(),
			r.memFree.String() + "/" + r.memAlloc.String(),
			int64(r.pods),
		}})
	}
	t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
		"TOTAL", "", rep.Total.Allocatable, rep.Total.Requested, rep.Total.Free, "", "", "",
	}})
	return t
}

// QueuesTable renders the ClusterQueues' GPU quota: one row per queue and GPU flavor (a queue
// that covers no GPUs gets one row with FLAVOR <none>). USED is the quota reserved by admitted
// workloads, FREE what is left of the nominal quota, BORROW the borrowing limit ("-": none set).
func QueuesTable(queues []kueue.ClusterQueue) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "ClusterQueue", Type: "string"},
		{Name: "Cohort", Type: "string"},
		{Name: "Flavor", Type: "string"},
		{Name: "Nominal", Type: "integer"},
		{Name: "Borrow", Type: "string"},
		{Name: "Used", Type: "integer"},
		{Name: "Free", Type: "integer"},
		{Name: "Pending", Type: "integer"},
		{Name: "Admitted", Type: "integer"},
	}}
	for _, q := range queues {
		cohort := q.Cohort
		if cohort == "" {
			cohort = "<none>"
		}
		row := func(flavor string, nominal int64, borrow string, used, free int64) {
			t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{q.Name, cohort, flavor, nominal, borrow, used, free, int64(q.Pending), int64(q.Admitted)}})
		}
		if len(q.Flavors) == 0 {
			row("<none>", 0, "-", 0, 0)
		}
		for _, f := range q.Flavors {
			borrow := "-"
			if f.BorrowingLimit != nil {
				borrow = strconv.FormatInt(*f.BorrowingLimit, 10)
			}
			row(f.Flavor, f.Nominal, borrow, f.Used, f.Free())
		}
	}
	return t
}
