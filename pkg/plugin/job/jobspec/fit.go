package jobspec

import "errors"

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
