package jobspec

import (
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Objects are what one submit creates: the Job, and the children that live and die with it.
type Objects struct {
	Job *batchv1.Job
	// Children are created after the Job, owned by it (see SetOwner), in this order.
	Children []runtime.Object
}

// All returns the Job followed by its children, the order in which they are created and printed.
func (o Objects) All() []runtime.Object {
	return append([]runtime.Object{o.Job}, o.Children...)
}

// Build turns a validated spec into objects. It does not validate: call Spec.Validate first.
func Build(s Spec) Objects {
	labels := objectLabels(s)
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name,
			Namespace:   s.Namespace,
			Labels:      labels,
			Annotations: toMap(s.Annotations),
		},
		Spec: batchv1.JobSpec{
			// Failures surface instead of being retried silently (the SDK's contract);
			// --retries changes it in applyRetries.
			BackoffLimit: ptr.To[int32](0),
			Parallelism:  ptr.To(int32(s.Nodes)),
			Completions:  ptr.To(int32(s.Nodes)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      objectLabels(s),
					Annotations: toMap(s.Annotations),
				},
				Spec: corev1.PodSpec{
					RestartPolicy:    corev1.RestartPolicyNever,
					ImagePullSecrets: pullSecrets(s.ImagePullSecrets),
					NodeSelector:     toMap(s.NodeSelector),
					Containers: []corev1.Container{{
						Name:      ContainerName,
						Image:     s.Image,
						Command:   ContainerCommand(s),
						Env:       containerEnv(s),
						EnvFrom:   envFrom(s.EnvFromSecrets),
						Resources: s.resources(),
					}},
					// The pause container becomes PID 1, so the training process is not, and
					// SIGTERM ends a program that installed no handler (see ContainerCommand).
					ShareProcessNamespace: ptr.To(true),
					Tolerations:           s.tolerations(),
					PriorityClassName:     s.PriorityClass,
					ServiceAccountName:    s.ServiceAccount,
				},
			},
		},
	}
	if s.Queue != "" {
		// The built object is the final one, as dry runs show it: labelled and suspended until
		// Kueue admits it. Submit creates it without the label and adds the label last, once
		// every child exists (see Unqueued).
		job.Labels[QueueLabel] = s.Queue
		job.Spec.Suspend = ptr.To(true)
		if s.PriorityClass != "" {
			// In a queue, Kueue decides which job runs and preempts whole workloads by their
			// WorkloadPriorityClass. A pod PriorityClass would also let the kube-scheduler evict
			// single ranks of other jobs, breaking the all-or-nothing admission the queue gives.
			// Kueue ignores the label until the queue label is added, so it can be there from
			// the Job's creation.
			job.Labels[WorkloadPriorityClassLabel] = s.PriorityClass
			job.Spec.Template.Spec.PriorityClassName = ""
		}
	}
	if s.TTL != nil {
		job.Spec.TTLSecondsAfterFinished = ptr.To(int32(s.TTL.Seconds()))
	}
	if s.Deadline != nil {
		job.Spec.ActiveDeadlineSeconds = ptr.To(int64(s.Deadline.Seconds()))
	}
	if s.TerminationGracePeriod != nil {
		job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(*s.TerminationGracePeriod / time.Second))
	}
	if s.StatusFile != nil {
		if job.Annotations == nil {
			job.Annotations = map[string]string{}
		}
		job.Annotations[StatusFileAnnotation] = *s.StatusFile
	}
	if s.GPUs > 0 && s.GPUName() != GPUResource {
		// status, list and the queue's messages count the GPUs in the resource named here.
		metav1.SetMetaDataAnnotation(&job.ObjectMeta, GPUResourceAnnotation, string(s.GPUName()))
	}
	applyRetries(s, job)
	applyElastic(s, job)
	addMounts(s, &job.Spec.Template.Spec)
	if shm := s.ShmQuantity(); shm != nil {
		pod := &job.Spec.Template.Spec
		pod.Volumes = append(pod.Volumes, corev1.Volume{
			Name: ShmVolume,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: shm,
			}},
		})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{Name: ShmVolume, MountPath: "/dev/shm"})
	}
	objs := Objects{Job: job}
	if s.Staging != nil {
		// Before the other children: the Secret is what the pod needs first.
		addStaging(s, &objs)
	}
	applyMPI(s, &objs)
	if len(s.SecretEnv) > 0 {
		objs.Children = append(objs.Children, envSecret(s))
	}
	if len(s.Files) > 0 {
		objs.Children = append(objs.Children, filesConfigMap(s))
	}
	if s.Workdir != nil {
		addWorkdir(s, &objs)
	}
	if !s.MultiNode() {
		return objs
	}
	job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	// With a subdomain matching the headless Service, pod NAME-i resolves as NAME-i.NAME.
	job.Spec.Template.Spec.Subdomain = s.Name
	if s.OneRankPerNode {
		// Even spread over hostnames puts each rank on its own node whenever there are at least
		// as many eligible nodes as ranks, and refuses to stack them otherwise.
		job.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       "kubernetes.io/hostname",
			WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{JobNameLabel: s.Name}},
		}}
	}
	objs.Children = append(objs.Children, rendezvousService(s))
	return objs
}

func rendezvousService(s Spec) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      s.Name,
			Namespace: s.Namespace,
			Labels:    objectLabels(s),
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{JobNameLabel: s.Name},
			// Ranks rendezvous before any of them is Ready, so their DNS records must exist early.
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{
				Name:       "rendezvous",
				Protocol:   corev1.ProtocolTCP,
				Port:       int32(s.MasterPort),
				TargetPort: intstr.FromInt32(int32(s.MasterPort)),
			}},
		},
	}
	if s.MPI() {
		port := int32(s.MPIAgentPort())
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "mpi-agent", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port),
		})
	}
	if s.MPISSH() {
		port := int32(s.MPISSHPort())
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "mpi-ssh", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port),
		})
	}
	return svc
}

// Queued reports the LocalQueue a built Job is submitted to, "" when none.
func Queued(job *batchv1.Job) string { return job.Labels[QueueLabel] }

// Unqueued returns a copy of job without the queue label, the form in which a queued Job is
// first created: Kueue ignores it until the label is added, so it cannot be admitted before
// its Service, ConfigMaps and Secrets exist.
func Unqueued(job *batchv1.Job) *batchv1.Job {
	j := job.DeepCopy()
	delete(j.Labels, QueueLabel)
	return j
}

// SetOwner makes job the controlling owner of child, so that deleting the Job deletes the child,
// and a foreground delete of the Job waits for it (blockOwnerDeletion).
func SetOwner(child metav1.Object, job *batchv1.Job) {
	child.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion:         "batch/v1",
		Kind:               "Job",
		Name:               job.Name,
		UID:                job.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}})
}

func objectLabels(s Spec) map[string]string {
	m := toMap(s.Labels)
	if m == nil {
		m = map[string]string{}
	}
	m[ManagedByLabel] = ManagedByValue
	return m
}

func containerEnv(s Spec) []corev1.EnvVar {
	env := append(jobEnv(s), pythonEnv(s)...)
	switch {
	case s.Elastic():
		env = append(append(env, nodeRankEnv()), elasticEnv(s)...)
	case s.MultiNode():
		env = append(env, nodeRankEnv(),
			corev1.EnvVar{Name: EnvWorldSize, Value: strconv.Itoa(s.Nodes)},
			corev1.EnvVar{Name: EnvNumGPUPerNode, Value: strconv.Itoa(s.GPUs)},
			corev1.EnvVar{Name: EnvNNodes, Value: strconv.Itoa(s.Nodes)},
			corev1.EnvVar{Name: EnvNProcPerNode, Value: strconv.Itoa(s.GPUs)},
			corev1.EnvVar{Name: EnvMasterAddr, Value: PodHost(s.Name, 0)},
			corev1.EnvVar{Name: EnvMasterPort, Value: strconv.Itoa(s.MasterPort)},
		)
	}
	if s.Staging != nil {
		env = append(env, stagingEnvVars(s)...)
	}
	env = append(env, mpiEnvVars(s)...)
	env = append(env, hangEnv(s)...)
	for _, kv := range s.Env {
		env = append(env, corev1.EnvVar{Name: kv.Key, Value: EscapeKubelet(kv.Value)})
	}
	return append(env, secretEnvVars(s)...)
}

// nodeRankEnv is NODE_RANK: the pod's completion index, read through the downward API from the
// annotation the Job controller puts on every pod of an Indexed Job. A $(JOB_COMPLETION_INDEX)
// reference would stay literal: the controller appends that variable after ours.
func nodeRankEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: EnvNodeRank, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']",
		},
	}}
}

// pythonEnv makes Python write its stdout and stderr unbuffered: in a container they are a
// pipe, which Python block-buffers, so a rank's lines would reach the kubelet's log (and
// `logs -f`) only when the buffer fills or the process exits, and an OOM kill would lose them.
// A value the user gives by --env or --secret-env is theirs to keep, an empty one included
// (Python reads an empty PYTHONUNBUFFERED as unset), so the default is left out then.
// A variable from --env-from-secret cannot be seen here, and a container's env wins over its
// envFrom: such a Secret does not turn the default off.
func pythonEnv(s Spec) []corev1.EnvVar {
	for _, kvs := range [][]KeyValue{s.Env, s.SecretEnv} {
		for _, kv := range kvs {
			if kv.Key == EnvPythonUnbuffered {
				return nil
			}
		}
	}
	return []corev1.EnvVar{{Name: EnvPythonUnbuffered, Value: "1"}}
}

func envFrom(secrets []string) []corev1.EnvFromSource {
	var out []corev1.EnvFromSource
	for _, name := range secrets {
		out = append(out, corev1.EnvFromSource{
			SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}},
		})
	}
	return out
}

func pullSecrets(names []string) []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, n := range names {
		out = append(out, corev1.LocalObjectReference{Name: n})
	}
	return out
}

func toMap(kvs []KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// EscapeKubelet protects a string from the kubelet's variable expansion, which rewrites
// $(VAR) to VAR's value and $$ to $ in command, args and env values: doubling every "$" makes
// the string arrive exactly as written.
func EscapeKubelet(s string) string {
	return strings.ReplaceAll(s, "$", "$$")
}
