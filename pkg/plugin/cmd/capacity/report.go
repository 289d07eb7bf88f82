package capacity

import (
	"sort"
	"strconv"
	"strings"

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

// NodeRow is one node's GPUs: Allocatable, Requested and Free count whole GPUs
// (nvidia.com/gpu), as they did before other GPU resources were shown; OtherGPUs the node's
// other GPU resources (MIG slices, shared GPUs), by name. CPU, memory and pod counts feed -o
// wide only.
type NodeRow struct {
	Name        string `json:"name"`
	Product     string `json:"product"`
	Allocatable int64  `json:"allocatable"`
	Requested   int64  `json:"requested"`
	Free        int64  `json:"free"`
	// OtherGPUs is absent from -o json on a node that has none, so a cluster of whole GPUs
	// prints what it did before.
	OtherGPUs map[corev1.ResourceName]Count `json:"otherGPUResources,omitempty"`

	cpuAlloc, cpuFree, memAlloc, memFree resource.Quantity
	pods                                 int
}

// Total sums the GPU columns over the nodes shown.
type Total struct {
	Allocatable int64                         `json:"allocatable"`
	Requested   int64                         `json:"requested"`
	Free        int64                         `json:"free"`
	OtherGPUs   map[corev1.ResourceName]Count `json:"otherGPUResources,omitempty"`
}

// Count is one GPU resource of a node, or of all of them.
type Count struct {
	Allocatable int64 `json:"allocatable"`
	Requested   int64 `json:"requested"`
	Free        int64 `json:"free"`
}

func (c *Count) add(o Count) {
	c.Allocatable += o.Allocatable
	c.Requested += o.Requested
	c.Free += o.Free
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
	for name := range alloc {
		if name != jobspec.GPUResource && jobspec.IsGPUResource(name) {
			if r.OtherGPUs == nil {
				r.OtherGPUs = map[corev1.ResourceName]Count{}
			}
			r.OtherGPUs[name] = Count{Allocatable: value(alloc, name), Requested: value(req, name), Free: value(free, name)}
		}
	}
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
		for name, c := range r.OtherGPUs {
			if rep.Total.OtherGPUs == nil {
				rep.Total.OtherGPUs = map[corev1.ResourceName]Count{}
			}
			sum := rep.Total.OtherGPUs[name]
			sum.add(c)
			rep.Total.OtherGPUs[name] = sum
		}
	}
	return rep
}

// Table renders the report for the table printer, with a TOTAL row last (node names are
// lower case, so it cannot be mistaken for a node). Each GPU resource besides whole GPUs that
// some node advertises gets a column of its own, named after it without nvidia.com/ and
// reading FREE/ALLOCATABLE ("-" on a node without it), after the whole GPUs' columns, so a
// cluster of whole GPUs shows what it did before.
func Table(rep Report) *metav1.Table {
	cols := []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"},
		{Name: "Product", Type: "string"},
		{Name: "Allocatable", Type: "integer"},
		{Name: "Requested", Type: "integer"},
		{Name: "Free", Type: "integer"},
	}
	others := make([]corev1.ResourceName, 0, len(rep.Total.OtherGPUs))
	for name := range rep.Total.OtherGPUs {
		others = append(others, name)
	}
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })
	for _, name := range others {
		cols = append(cols, metav1.TableColumnDefinition{Name: strings.TrimPrefix(string(name), "nvidia.com/"), Type: "string",
			Description: "free/allocatable " + string(name)})
	}
	cols = append(cols,
		metav1.TableColumnDefinition{Name: "CPU-Free", Type: "string", Priority: 1},
		metav1.TableColumnDefinition{Name: "Memory-Free", Type: "string", Priority: 1},
		metav1.TableColumnDefinition{Name: "Pods", Type: "integer", Priority: 1},
	)
	otherCells := func(m map[corev1.ResourceName]Count) []any {
		cells := make([]any, len(others))
		for i, name := range others {
			cells[i] = "-"
			if c, ok := m[name]; ok {
				cells[i] = strconv.FormatInt(c.Free, 10) + "/" + strconv.FormatInt(c.Allocatable, 10)
			}
		}
		return cells
	}
	t := &metav1.Table{ColumnDefinitions: cols}
	for _, r := range rep.Nodes {
		product := r.Product
		if product == "" {
			product = "<none>"
		}
		cells := append([]any{r.Name, product, r.Allocatable, r.Requested, r.Free}, otherCells(r.OtherGPUs)...)
		t.Rows = append(t.Rows, metav1.TableRow{Cells: append(cells,
			r.cpuFree.String()+"/"+r.cpuAlloc.String(),
			r.memFree.String()+"/"+r.memAlloc.String(),
			int64(r.pods),
		)})
	}
	cells := append([]any{"TOTAL", "", rep.Total.Allocatable, rep.Total.Requested, rep.Total.Free}, otherCells(rep.Total.OtherGPUs)...)
	t.Rows = append(t.Rows, metav1.TableRow{Cells: append(cells, "", "", "")})
	return t
}

// QueuesTable renders the ClusterQueues' GPU quota: one row per queue and GPU flavor (a queue
// that covers no GPUs gets one row with FLAVOR <none>; a quota of MIG slices or shared GPUs
// names its resource after the flavor, "a100-mig (mig-1g.10gb)"). USED is the quota reserved by admitted
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
			flavor := f.Flavor
			if f.Resource != "" {
				flavor += " (" + strings.TrimPrefix(string(f.Resource), "nvidia.com/") + ")"
			}
			row(flavor, f.Nominal, borrow, f.Used, f.Free())
		}
	}
	return t
}
