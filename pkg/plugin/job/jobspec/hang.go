package jobspec

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The hang watchdog's settings, read by the supervisor in each rank's pod.
const (
	// EnvHangTimeout is --hang-timeout in seconds.
	EnvHangTimeout = "TAO_HANG_TIMEOUT"
	// EnvSupervisorAddr is host:port of rank 0's supervisor, where the ranks of a multi-node job
	// share their last sign of life (rank 0 listens there, the others report to it).
	EnvSupervisorAddr = "TAO_SUPERVISOR_ADDR"
	// EnvNodeName is the pod's node, from the downward API: a hang names the node that went
	// silent first.
	EnvNodeName = "TAO_NODE_NAME"
	// MinHangTimeout is the shortest --hang-timeout: a rendezvous or a first batch (data
	// loading, compilation) can take that long without a line.
	MinHangTimeout = 30 * time.Second
	// ExitHang is the supervisor's exit code for a hang it ended: with --retries the Job counts it
	// like any failure and retries the rank, from its newest complete checkpoint.
	ExitHang int32 = 204
)

// SupervisorPort is where rank 0's supervisor listens: the port after the rendezvous port, as
// torchrun's static rendezvous uses MASTER_PORT alone.
func (s Spec) SupervisorPort() int { return s.MasterPort + 1 }

// hangEnv are the watchdog's variables (nothing without --hang-timeout).
func hangEnv(s Spec) []corev1.EnvVar {
	if s.HangTimeout <= 0 {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: EnvHangTimeout, Value: strconv.Itoa(int(s.HangTimeout / time.Second))},
		{Name: EnvNodeName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	if s.MultiNode() {
		env = append(env, corev1.EnvVar{Name: EnvSupervisorAddr, Value: PodHost(s.Name, 0) + ":" + strconv.Itoa(s.SupervisorPort())})
	}
	return env
}

// ValidateHangTimeout checks a --hang-timeout (0 is off).
func ValidateHangTimeout(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < MinHangTimeout:
		return fmt.Errorf("invalid --hang-timeout %s: must be %s or more (a rendezvous or a first batch can take that long without a line)", d, MinHangTimeout)
	case d%time.Second != 0:
		return fmt.Errorf("invalid --hang-timeout %s: must be whole seconds", d)
	}
	return nil
}

// validateHang checks --hang-timeout.
func (s *Spec) validateHang() []error {
	var errs []error
	if err := ValidateHangTimeout(s.HangTimeout); err != nil {
		return []error{err}
	}
	switch {
	case s.HangTimeout == 0:
		return nil
	case s.Staging == nil:
		errs = append(errs, fmt.Errorf("internal error: --hang-timeout without the supervisor"))
	}
	if s.MultiNode() && s.SupervisorPort() > 65535 {
		errs = append(errs, fmt.Errorf("invalid --master-port %d with --hang-timeout: the supervisors use the next port, which must be 65535 or less", s.MasterPort))
	}
	return errs
}
