package jobspec

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// maxNameLength is the Job name limit: the Job controller copies the name into the pods'
// job-name label, and label values stop at 63 characters.
const maxNameLength = validation.DNS1123LabelMaxLength

// reservedEnv are set by kubectl-tao or the Job controller in multi-node jobs; letting --env
// override them would silently break the rendezvous.
var reservedEnv = []string{
	EnvWorldSize, EnvNumGPUPerNode, EnvNNodes, EnvNProcPerNode, EnvNodeRank, EnvMasterAddr,
	EnvMasterPort, EnvCompletionIndex,
}

// ParseKeyValues splits KEY=VALUE flag values, keeping their order. A value may be empty and
// may itself contain "="; a missing "=" or an empty key is an error naming the flag.
func ParseKeyValues(flag string, values []string) ([]KeyValue, error) {
	out := make([]KeyValue, 0, len(values))
	seen := map[string]bool{}
	for _, v := range values {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return nil, fmt.Errorf("--%s %q: expected KEY=VALUE", flag, v)
		}
		if k == "" {
			return nil, fmt.Errorf("--%s %q: the key is empty", flag, v)
		}
		if seen[k] {
			return nil, fmt.Errorf("--%s: %q is given more than once", flag, k)
		}
		seen[k] = true
		out = append(out, KeyValue{Key: k, Value: val})
	}
	return out, nil
}

// Validate reports every problem with the spec at once, each naming the flag or argument at
// fault, so the user can fix them in one go.
func (s *Spec) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	errs = append(errs, s.validateName()...)
	if s.Namespace == "" {
		add("the namespace is empty")
	} else if msgs := validation.IsDNS1123Label(s.Namespace); len(msgs) > 0 {
		add("invalid namespace %q: %s", s.Namespace, strings.Join(msgs, "; "))
	}
	switch {
	case strings.TrimSpace(s.Image) == "":
		add("--image is required")
	case strings.ContainsAny(s.Image, " \t\r\n"):
		add("invalid --image %q: an image reference has no whitespace", s.Image)
	}
	switch {
	case len(s.Command) == 0:
		add("a command is required after \"--\", for example: -- python train.py")
	case len(s.Command) == 1 && strings.TrimSpace(s.Command[0]) == "":
		add("the command after \"--\" is empty")
	}
	errs = append(errs, s.validateCounts()...)
	errs = append(errs, s.validateElastic()...)
	errs = append(errs, s.validateMPI()...)
	if s.Retries < 0 || s.Retries > MaxRetries {
		add("invalid --retries %d: must be between 0 and %d (evictions and preemptions do not count against it)", s.Retries, MaxRetries)
	}
	if s.MasterPort < 1 || s.MasterPort > 65535 {
		add("invalid --master-port %d: must be between 1 and 65535", s.MasterPort)
	}
	if s.TTL != nil {
		switch {
		case *s.TTL < 0:
			add("invalid --ttl %s: must not be negative", s.TTL)
		case *s.TTL%time.Second != 0:
			add("invalid --ttl %s: must be a whole number of seconds", s.TTL)
		case *s.TTL/time.Second > (1<<31 - 1):
			add("invalid --ttl %s: too long", s.TTL)
		}
	}
	for _, kv := range s.Env {
		errs = append(errs, s.validateEnvName("env", kv.Key)...)
		if !utf8.ValidString(kv.Value) {
			add("invalid --env %q: the value is not valid UTF-8 (the API server's JSON would replace those bytes)", kv.Key)
		}
	}
	for i, word := range s.Command {
		if !utf8.ValidString(word) {
			add("invalid command: word %d after \"--\" is not valid UTF-8 (the API server's JSON would replace those bytes)", i+1)
			break
		}
	}
	errs = append(errs, s.validateSecretEnv()...)
	errs = append(errs, s.validateGracePeriod()...)
	errs = append(errs, s.validateHang()...)
	for _, name := range s.EnvFromSecrets {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			add("invalid --env-from-secret %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	errs = append(errs, s.validatePullSecrets()...)
	errs = append(errs, validateLabels("node-selector", s.NodeSelector)...)
	errs = append(errs, validateLabels("label", s.Labels)...)
	for _, kv := range s.Labels {
		if kv.Key == ManagedByLabel || kv.Key == JobNameLabel || strings.HasPrefix(kv.Key, "batch.kubernetes.io/") {
			add("invalid --label %q: the key is reserved for kubectl-tao and the Job controller", kv.Key)
		}
		if kv.Key == WorkloadPriorityClassLabel {
			add("invalid --label %q: use --priority-class NAME with --queue to give a queued job a Kueue WorkloadPriorityClass", kv.Key)
		}
		if kv.Key == QueueLabel {
			// As a plain label it would be on the Job from its creation, and Kueue could admit it
			// before its Service exists; --queue adds it once everything is in place.
			add("invalid --label %q: use --queue NAME to submit to a Kueue LocalQueue", kv.Key)
		}
	}
	errs = append(errs, s.validateQueue()...)
	total := 0
	for _, kv := range s.Annotations {
		if msgs := validation.IsQualifiedName(strings.ToLower(kv.Key)); len(msgs) > 0 {
			add("invalid --annotation key %q: %s", kv.Key, strings.Join(msgs, "; "))
		}
		if kv.Key == SubmittingAnnotation {
			add("invalid --annotation %q: the key is reserved for kubectl-tao (it marks a submit in progress)", kv.Key)
		}
		if kv.Key == GPUResourceAnnotation {
			add("invalid --annotation %q: use --gpu-resource NAME to count --gpus in another GPU resource", kv.Key)
		}
		if !utf8.ValidString(kv.Value) {
			add("invalid --annotation %q: the value is not valid UTF-8 (the API server's JSON would replace those bytes)", kv.Key)
		}
		total += len(kv.Key) + len(kv.Value)
	}
	if total > 256*1024 {
		add("--annotation: %d bytes in total, more than the 256 KiB Kubernetes allows", total)
	}
	errs = append(errs, s.validateResources()...)
	errs = append(errs, s.validateMounts()...)
	errs = append(errs, s.validateStaging()...)
	errs = append(errs, s.validateWorkdir()...)
	return errors.Join(errs...)
}

// validateEnvName checks the name of a variable the user sets (--env, --secret-env): one the
// container accepts, and none kubectl-tao sets itself.
func (s *Spec) validateEnvName(flag, key string) []error {
	var errs []error
	if msgs := validation.IsEnvVarName(key); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("invalid --%s %q: %s", flag, key, strings.Join(msgs, "; ")))
	}
	if key == s3layout.EnvJobID || key == s3layout.EnvJobUID {
		errs = append(errs, fmt.Errorf("invalid --%s %q: kubectl-tao sets it to the Job's name and UID", flag, key))
	}
	if s.MultiNode() && slices.Contains(reservedEnv, key) {
		errs = append(errs, fmt.Errorf("invalid --%s %q: multi-node jobs set it themselves (use --nodes, --gpus or --master-port)", flag, key))
	}
	if s.MPI() && slices.Contains(mpiEnv, key) {
		errs = append(errs, fmt.Errorf("invalid --%s %q: --launcher %s sets it (use --slots-per-node or --master-port)", flag, key, s.Launcher))
	}
	return errs
}

// validateCounts checks --gpus and --nodes; it is part of Validate and ValidateShape.
func (s *Spec) validateCounts() []error {
	var errs []error
	if s.GPUs < 0 {
		errs = append(errs, fmt.Errorf("invalid --gpus %d: must be 0 or more", s.GPUs))
	}
	if s.Nodes < 1 {
		errs = append(errs, fmt.Errorf("invalid --nodes %d: must be 1 or more", s.Nodes))
	}
	return errs
}

func (s *Spec) validatePullSecrets() []error {
	var errs []error
	for _, name := range s.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid --image-pull-secret %q: %s", name, strings.Join(msgs, "; ")))
		}
	}
	return errs
}

func (s *Spec) validateQueue() []error {
	if s.Queue == "" {
		return nil
	}
	// A LocalQueue name is an object name, and it is carried as a label value.
	msgs := append(validation.IsDNS1123Subdomain(s.Queue), validation.IsValidLabelValue(s.Queue)...)
	if len(msgs) > 0 {
		return []error{fmt.Errorf("invalid --queue %q: %s", s.Queue, strings.Join(msgs, "; "))}
	}
	return nil
}

func (s *Spec) validateName() []error {
	if s.Name == "" {
		return []error{errors.New("the job name is empty")}
	}
	if len(s.Name) > maxNameLength {
		return []error{fmt.Errorf("invalid job name %q: must be no more than %d characters", s.Name, maxNameLength)}
	}
	if !s.MultiNode() {
		if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
			return []error{fmt.Errorf("invalid job name %q: %s", s.Name, strings.Join(msgs, "; "))}
		}
		return nil
	}
	// The rendezvous Service is named after the Job, and Service names are DNS-1035 labels.
	if msgs := validation.IsDNS1035Label(s.Name); len(msgs) > 0 {
		return []error{fmt.Errorf("invalid job name %q for a multi-node job (it also names the rendezvous Service): %s",
			s.Name, strings.Join(msgs, "; "))}
	}
	// Pods are reachable as NAME-<index>.NAME: the hostname NAME-<index> must be a DNS label too.
	host := s.Name + "-" + strconv.Itoa(max(s.Nodes, s.NodesMax)-1)
	if len(host) > validation.DNS1123LabelMaxLength {
		return []error{fmt.Errorf("invalid job name %q for %d nodes: the pod hostname %q would be longer than %d characters",
			s.Name, max(s.Nodes, s.NodesMax), host, validation.DNS1123LabelMaxLength)}
	}
	return nil
}

func validateLabels(flag string, kvs []KeyValue) []error {
	var errs []error
	for _, kv := range kvs {
		if msgs := validation.IsQualifiedName(kv.Key); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid --%s key %q: %s", flag, kv.Key, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(kv.Value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid --%s value %q for %q: %s", flag, kv.Value, kv.Key, strings.Join(msgs, "; ")))
		}
	}
	return errs
}
