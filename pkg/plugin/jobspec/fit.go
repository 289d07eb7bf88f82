package jobspec

import (
	"errors"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/gpufit"
)

// FitRequest is what the job asks of the nodes: Nodes ranks of PodRequest each, on nodes that
// match the node selector and whose taints the pods tolerate. submit's capacity guard and
// preflight's fit check both judge this request, so they cannot disagree about a job.
func (s *Spec) FitRequest() gpufit.Request {
	set := labels.Set{}
	for _, kv := range s.NodeSelector {
		set[kv.Key] = kv.Value
	}
	return gpufit.Request{Pods: int64(s.Nodes), PerPod: s.PodRequest(), Selector: labels.SelectorFromSet(set), Tolerations: s.PodTolerations()}
}

// ValidateShape reports the problems of the fields that decide whether and where the job fits
// (see jobflags.Shape), with Validate's messages: for a command that judges a job's shape
// without submitting it (preflight).
func (s *Spec) ValidateShape() error {
	var errs []error
	errs = append(errs, s.validateCounts()...)
	errs = append(errs, s.validatePullSecrets()...)
	errs = append(errs, validateLabels("node-selector", s.NodeSelector)...)
	errs = append(errs, s.validateQueue()...)
	errs = append(errs, s.validateResources()...)
	return errors.Join(errs...)
}
