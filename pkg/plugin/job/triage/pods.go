package triage

import (
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// stuckAfter is how long past its deletion time a pod may linger before it counts as stuck:
// finalizers and the kubelet's confirmation normally take seconds.
const stuckAfter = time.Minute

// finding is what inspect learns about one pod: the readiness issue replicas shows and the
// node event diagnose reports are two views of it.
type finding struct {
	name       string
	message    string
	class      string
	suggestion string
	exitCode   *int32
	at         time.Time
}

// podView gives the rules what they need about one pod.
type podView struct {
	s      *Snapshot
	pod    *corev1.Pod
	rank   int
	events []corev1.Event
}

// eventsByPod indexes events by the UID of the pod they are about, newest last. Events whose
// UID is missing (some emitters omit it) match on the pod's name.
func eventsByPod(s *Snapshot) map[int][]corev1.Event {
	byUID, byName := map[string]int{}, map[string]int{}
	for i := range s.Pods {
		byUID[string(s.Pods[i].UID)] = i
		byName[s.Pods[i].Name] = i
	}
	out := map[int][]corev1.Event{}
	for _, e := range s.Events {
		if e.InvolvedObject.Kind != "Pod" {
			continue
		}
		i, ok := byUID[string(e.InvolvedObject.UID)]
		if !ok && e.InvolvedObject.UID == "" {
			i, ok = byName[e.InvolvedObject.Name]
		}
		if ok {
			out[i] = append(out[i], e)
		}
	}
	for i := range out {
		sort.SliceStable(out[i], func(a, b int) bool { return eventTime(out[i][a]).Before(eventTime(out[i][b])) })
	}
	return out
}

// eventTime is when an event last happened, whichever API wrote it.
func eventTime(e corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// latest is the newest event with one of the reasons.
func (v podView) latest(reasons ...string) *corev1.Event {
	for i := len(v.events) - 1; i >= 0; i-- {
		for _, r := range reasons {
			if v.events[i].Reason == r {
				return &v.events[i]
			}
		}
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// nodeNotReady explains why the pod's node is not Ready, or returns "".
func (v podView) nodeNotReady() (string, time.Time) {
	node := v.s.Nodes[v.pod.Spec.NodeName]
	if node == nil {
		return "", time.Time{}
	}
	c := nodeCondition(node, corev1.NodeReady)
	if c != nil && c.Status == corev1.ConditionTrue {
		return "", time.Time{}
	}
	msg := fmt.Sprintf("node %s is NotReady", node.Name)
	if c == nil {
		return msg + " (it reports no Ready condition)", time.Time{}
	}
	if c.Status == corev1.ConditionUnknown {
		msg = fmt.Sprintf("node %s is NotReady (its kubelet stopped reporting)", node.Name)
	}
	if c.Message != "" {
		msg += ": " + c.Message
	}
	return msg, c.LastTransitionTime.Time
}

// pressure lists the node's pressure conditions, for eviction messages.
func (v podView) pressure() string {
	node := v.s.Nodes[v.pod.Spec.NodeName]
	if node == nil {
		return ""
	}
	var on []string
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c := nodeCondition(node, t); c != nil && c.Status == corev1.ConditionTrue {
			on = append(on, string(t))
		}
	}
	if len(on) == 0 {
		return ""
	}
	return fmt.Sprintf("node %s has %s", node.Name, strings.Join(on, ", "))
}

// inspect applies the rules to one pod, most specific first. nil means the pod is fine or
// still making progress.
func (v podView) inspect() *finding {
	pod := v.pod
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return nil
	case corev1.PodFailed:
		return v.failed()
	}
	if f := v.stuckTerminating(); f != nil {
		return f
	}
	if pod.DeletionTimestamp != nil {
		// Being deleted, within its grace period: on its way out, not stuck.
		return nil
	}
	if msg, at := v.nodeNotReady(); msg != "" {
		return &finding{
			name: "NodeNotReady", message: msg, class: ErrInfra, at: at,
			suggestion: fmt.Sprintf("Node %s stopped responding, so rank %d cannot make progress. Cancel and resubmit "+
				"the job; if it happens again, ask the cluster admin to cordon the node.", pod.Spec.NodeName, v.rank),
		}
	}
	if pod.Status.Phase == corev1.PodUnknown {
		return &finding{name: "NodeLost", class: ErrInfra, message: "the pod's state is Unknown: its node stopped reporting",
			suggestion: "The node stopped reporting. Cancel and resubmit the job."}
	}
	if f := v.unscheduled(); f != nil {
		return f
	}
	if f := v.waiting(); f != nil {
		return f
	}
	if f := v.mountFailure(); f != nil {
		return f
	}
	if pod.Status.Phase == corev1.PodRunning {
		if c := podCondition(pod, corev1.PodReady); c != nil && c.Status != corev1.ConditionTrue {
			if e := v.latest("Unhealthy"); e != nil {
				return &finding{name: "Unhealthy", message: e.Message, class: ErrProgram, at: eventTime(*e),
					suggestion: "A probe of the training container fails: check the probe and the program's logs."}
			}
		}
	}
	return nil
}

// stuckTerminating finds a pod whose deletion is well past due: its node usually cannot
// confirm the stop.
func (v podView) stuckTerminating() *finding {
	pod := v.pod
	if pod.DeletionTimestamp == nil || v.s.Now.IsZero() {
		return nil
	}
	// deletionTimestamp is when the grace period ends, not when deletion was asked for.
	late := v.s.Now.Sub(pod.DeletionTimestamp.Time)
	if late < stuckAfter {
		return nil
	}
	msg := fmt.Sprintf("the pod is still terminating %s after its grace period ended", late.Round(time.Second))
	if n, _ := v.nodeNotReady(); n != "" {
		msg += "; " + n
	}
	if c := podCondition(pod, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue {
		msg += "; " + jobstatus.ReasonMessage(c.Reason, c.Message)
	}
	sugg := fmt.Sprintf("The node has not confirmed that the pod stopped. If node %s is gone for good, "+
		"remove the pod with `kubectl delete pod %s -n %s --force --grace-period=0` (only once the node is "+
		"really down: the process may still be running there).", pod.Spec.NodeName, pod.Name, pod.Namespace)
	if len(pod.Finalizers) > 0 && pod.Spec.NodeName == "" {
		sugg = fmt.Sprintf("Finalizers %s hold the pod: the controller that owns them is not removing them.",
			strings.Join(pod.Finalizers, ", "))
	}
	return &finding{name: "Terminating", message: msg, class: ErrInfra, suggestion: sugg, at: pod.DeletionTimestamp.Time}
}

// failed explains a pod in phase Failed: something stopped it from outside (infrastructure)
// or the program ended badly.
func (v podView) failed() *finding {
	pod := v.pod
	if c := podCondition(pod, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue {
		return v.disrupted(c)
	}
	switch reason := pod.Status.Reason; {
	case reason == "Evicted":
		msg := pod.Status.Message
		if p := v.pressure(); p != "" {
			msg += " (" + p + ")"
		}
		return &finding{name: "Evicted", message: msg, class: ErrInfra, at: v.finishedAt(),
			suggestion: "The kubelet evicted the pod because its node ran short of memory or disk. Resubmit; " +
				"if it repeats, ask for a node with more headroom or keep less data on local disk."}
	case reason == "NodeLost" || reason == "Shutdown" || reason == "NodeShutdown" || reason == "Terminated":
		return &finding{name: "NodeLost", message: jobstatus.ReasonMessage(reason, pod.Status.Message), class: ErrInfra, at: v.finishedAt(),
			suggestion: fmt.Sprintf("Node %s went away under the pod. Resubmit the job.", pod.Spec.NodeName)}
	case reason == "DeadlineExceeded":
		return &finding{name: "DeadlineExceeded", message: pod.Status.Message, class: ErrInfra, at: v.finishedAt(),
			suggestion: "The pod ran past its activeDeadlineSeconds. Raise the deadline or shorten the run."}
	case reason == "UnexpectedAdmissionError" || strings.HasPrefix(reason, "OutOf"):
		return &finding{name: reason, message: pod.Status.Message, class: ErrInfra, at: v.finishedAt(),
			suggestion: fmt.Sprintf("The kubelet on %s refused the pod (%s): its device plugin or resources "+
				"disagree with what the scheduler saw. Resubmit; tell the cluster admin if it repeats.", pod.Spec.NodeName, reason)}
	}
	if f := v.exited(); f != nil {
		return f
	}
	return &finding{name: "Failed", message: jobstatus.ReasonMessage(pod.Status.Reason, pod.Status.Message), class: ErrProgram, at: v.finishedAt(),
		suggestion: fmt.Sprintf("The pod failed without an exit code. Describe it: kubectl describe pod %s -n %s.", pod.Name, pod.Namespace)}
}

// disrupted names what the DisruptionTarget condition says removed the pod.
func (v podView) disrupted(c *corev1.PodCondition) *finding {
	f := &finding{message: jobstatus.ReasonMessage(c.Reason, c.Message), class: ErrInfra, at: c.LastTransitionTime.Time}
	if t := v.terminated(); t != nil {
		f.exitCode = &t.ExitCode
	}
	switch c.Reason {
	case "PreemptionByScheduler":
		f.name = "Preempted"
		f.suggestion = "A higher-priority pod preempted this rank. Resubmit, or run at a higher PriorityClass or " +
			"through a queue (Kueue) that admits the whole job at once."
	case "DeletionByTaintManager", "DeletionByPodGC":
		f.name = "NodeLost"
		f.suggestion = fmt.Sprintf("Node %s became unreachable or was removed, and its pods were deleted. Resubmit the job.", v.pod.Spec.NodeName)
	case "EvictionByEvictionAPI":
		f.name = "Evicted"
		f.suggestion = "The pod was evicted through the API, usually a node drain or an autoscaler scale-down. " +
			"Resubmit; a PodDisruptionBudget protects running training jobs from voluntary drains."
	case "TerminationByKubelet":
		f.name = "Evicted"
		if p := v.pressure(); p != "" {
			f.message += " (" + p + ")"
		}
		f.suggestion = "The kubelet stopped the pod (node pressure or a node shutdown). Resubmit; if it repeats, " +
			"ask for a node with more headroom."
	default:
		f.name = "Disrupted"
		f.suggestion = "Something outside the program removed the pod. Resubmit the job."
	}
	return f
}

// terminated is the first container (init containers first) that ended with a non-zero code.
func (v podView) terminated() *corev1.ContainerStateTerminated {
	for _, list := range [][]corev1.ContainerStatus{v.pod.Status.InitContainerStatuses, v.pod.Status.ContainerStatuses} {
		for i := range list {
			if t := list[i].State.Terminated; t != nil && t.ExitCode != 0 {
				return t
			}
		}
	}
	return nil
}

func (v podView) finishedAt() time.Time {
	if t := v.terminated(); t != nil {
		return t.FinishedAt.Time
	}
	if c := podCondition(v.pod, corev1.PodReady); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// staged reports whether the pod runs the supervisor (staging, checkpoints, --hang-timeout),
// whose own failure codes mean its failures rather than the command's.
func (v podView) staged() bool { return jobspec.Supervised(&v.pod.Spec) }

// stagingSuggestion says where a staging failure's cause is: the stager's error on stderr.
func stagingSuggestion(code int32, job string, rank int) string {
	what := "stage out's error (the upload of the outputs)"
	switch code {
	case s3layout.ExitStageIn:
		what = "stage in's error (the download of the inputs)"
	case s3layout.ExitStageRun:
		what = "the wrapper's error"
	}
	return fmt.Sprintf("A staging failure, not the training command's: with --retries it fails the job at once. Read %s at the end "+
		"of the rank's log: kubectl tao logs %s --rank %d. Check the S3 credentials, bucket and endpoint, and that "+
		"every --output-path exists when the command ends.", what, job, rank)
}

// exited explains a non-zero exit: OOM, a signal, or what the last log lines say.
func (v podView) exited() *finding {
	t := v.terminated()
	if t == nil {
		return nil
	}
	code := t.ExitCode
	f := &finding{name: t.Reason, exitCode: &code, class: ErrProgram, at: t.FinishedAt.Time,
		message: describeExit(code), suggestion: exitSuggestion(code, v.jobName(), v.rank)}
	if f.name == "" {
		f.name = "Error"
	}
	if t.Message != "" {
		f.message += ": " + t.Message
	}
	if t.Reason == "OOMKilled" {
		f.message = describeExit(code) + ": the container hit its memory limit and the kernel killed it"
		f.suggestion = "Container OOM-killed. Reduce batch size, lower max_length, or request more memory on a larger node."
		return f
	}
	if code == s3layout.ExitStageRun && t.Message != "" && v.staged() && jobspec.MPIPod(&v.pod.Spec) {
		// The supervisor leaves this message only when rank 0 gave up on the other pods'
		// agents: the cause is on those pods, which it names.
		f.name, f.class = MPIUnreachable, ErrInfra
		f.message = describeExit(code) + ": mpirun never ran: " + t.Message
		f.suggestion = fmt.Sprintf("Rank 0 waited for the MPI agent of every other pod (with --launcher mpi-ssh, then for ssh to every pod) "+
			"and some never answered. See why those pods are not running (kubectl tao replicas %s); one that runs without answering "+
			"says why in its log (kubectl tao logs %s --rank N), or a NetworkPolicy blocks the agent's port ($TAO_MPI_AGENT_PORT) "+
			"or sshd's ($TAO_MPI_SSH_PORT) between the job's pods.", v.jobName(), v.jobName())
		return f
	}
	if what, ok := s3layout.StagingFailure(code); ok && v.staged() {
		f.name = "StagingFailed"
		f.message = describeExit(code) + ": " + what
		f.suggestion = stagingSuggestion(code, v.jobName(), v.rank)
		return f
	}
	if code == jobspec.ExitHang && v.staged() {
		f.name = Hang
		f.message = describeExit(code) + ": the supervisor ended the command as hung"
		if t.Message != "" {
			f.message += ": " + t.Message
		}
		f.suggestion = fmt.Sprintf("Every rank's stacks at the hang are in its log: kubectl tao logs %s --rank %d --attempt N. "+
			"Look for the rank in a different frame from the others (a rank that never reached a collective), "+
			"and for an NCCL or gloo peer that went away. With --retries the job started again from its newest checkpoint.", v.jobName(), v.rank)
		return f
	}
	if t.Reason == "StartError" || t.Reason == "ContainerCannotRun" {
		f.message = "the container's command could not be started: " + t.Message
		f.suggestion = startFailure(t.Message)
		return f
	}
	lines := v.s.Logs[v.pod.Name]
	if p, line := scanLogs(lines); p != nil {
		f.name, f.suggestion = p.name, p.suggestion
		f.message = describeExit(code) + "; the log says: " + line
		return f
	}
	if l := lastLine(lines); l != "" {
		f.message += "; last log line: " + l
	}
	return f
}

func (v podView) jobName() string {
	if v.s.Job != nil {
		return v.s.Job.Name
	}
	return v.pod.Labels[batchv1.JobNameLabel]
}

// imageReasons are the kubelet's waiting reasons for an image that cannot be pulled.
var imageReasons = map[string]bool{
	"ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// waiting explains a container the kubelet cannot start.
func (v podView) waiting() *finding {
	pod := v.pod
	for _, pair := range []struct {
		statuses []corev1.ContainerStatus
		specs    []corev1.Container
	}{{pod.Status.InitContainerStatuses, pod.Spec.InitContainers}, {pod.Status.ContainerStatuses, pod.Spec.Containers}} {
		for i := range pair.statuses {
			cs := &pair.statuses[i]
			w := cs.State.Waiting
			if w == nil {
				continue
			}
			switch {
			case imageReasons[w.Reason]:
				return v.imagePull(cs, w)
			case w.Reason == "CreateContainerConfigError":
				return &finding{name: w.Reason, message: w.Message, class: ErrInfra, at: v.eventAt("Failed"),
					suggestion: fmt.Sprintf("A Secret, ConfigMap or key the container needs does not exist in namespace %s. "+
						"Create it (kubectl create secret ...) or fix --env-from-secret, then resubmit.", pod.Namespace)}
			case w.Reason == "CrashLoopBackOff":
				f := &finding{name: w.Reason, message: w.Message, class: ErrProgram, at: v.eventAt("BackOff"),
					suggestion: fmt.Sprintf("The container keeps exiting. Read its logs: kubectl tao logs %s --rank %d.", v.jobName(), v.rank)}
				if t := cs.LastTerminationState.Terminated; t != nil {
					code := t.ExitCode
					f.exitCode = &code
					f.message = jobstatus.ReasonMessage(f.message, "last exit: "+jobstatus.ReasonMessage(t.Reason, describeExit(code)))
					if t.Reason == "OOMKilled" {
						f.suggestion = "Container OOM-killed. Reduce batch size, lower max_length, or request more memory on a larger node."
					}
				}
				return f
			case w.Reason == "RunContainerError" || w.Reason == "CreateContainerError" || w.Reason == "StartError":
				return &finding{name: w.Reason, message: w.Message, class: ErrProgram, at: v.eventAt("Failed"),
					suggestion: "The container runtime could not start the command: check the image's entrypoint and the command."}
			}
		}
	}
	return nil
}

func (v podView) eventAt(reasons ...string) time.Time {
	if e := v.latest(reasons...); e != nil {
		return eventTime(*e)
	}
	return time.Time{}
}

// imagePull explains an image that cannot be pulled, naming the image and the pull secrets.
func (v podView) imagePull(cs *corev1.ContainerStatus, w *corev1.ContainerStateWaiting) *finding {
	pod := v.pod
	msg := w.Message
	if msg == "" {
		if e := v.latest("Failed", "BackOff"); e != nil {
			msg = e.Message
		}
	}
	image := cs.Image
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == cs.Name {
			image = c.Image
		}
	}
	var secrets []string
	for _, s := range pod.Spec.ImagePullSecrets {
		secrets = append(secrets, s.Name)
	}
	detail := fmt.Sprintf("image %q, no image pull secret set", image)
	sugg := fmt.Sprintf("The image %q could not be pulled. Check its name and tag; for a private registry "+
		"(nvcr.io) pre-create a pull secret and pass --image-pull-secret NAME.", image)
	if len(secrets) > 0 {
		detail = fmt.Sprintf("image %q, image pull secret %s", image, strings.Join(secrets, ", "))
		sugg = fmt.Sprintf("The image %q could not be pulled with pull secret %s. Check the image's name and tag, "+
			"and that the secret holds valid credentials for its registry.", image, strings.Join(secrets, ", "))
	}
	if e := v.latest("FailedToRetrieveImagePullSecret"); e != nil {
		detail += "; " + e.Message
		sugg = fmt.Sprintf("An image pull secret the pod names does not exist in namespace %s (%s). Create it "+
			"(kubectl create secret docker-registry NAME ...) and resubmit.", pod.Namespace, strings.Join(secrets, ", "))
	}
	return &finding{name: w.Reason, message: jobstatus.ReasonMessage(msg, detail), class: ErrInfra, at: v.eventAt("Failed", "BackOff"), suggestion: sugg}
}

// mountFailure explains a pod stuck in ContainerCreating because a volume cannot be mounted.
func (v podView) mountFailure() *finding {
	e := v.latest("FailedMount", "FailedAttachVolume")
	if e == nil || v.pod.Spec.NodeName == "" {
		return nil
	}
	for _, cs := range v.pod.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return nil
		}
	}
	return &finding{name: e.Reason, message: e.Message, class: ErrInfra, at: eventTime(*e),
		suggestion: fmt.Sprintf("A volume of the pod cannot be mounted: check that the PersistentVolumeClaim, Secret or "+
			"ConfigMap it names exists in namespace %s and that the claim is Bound (kubectl get pvc -n %s).",
			v.pod.Namespace, v.pod.Namespace)}
}

// podClaims names the PersistentVolumeClaims a pod mounts.
func podClaims(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	if len(out) == 0 {
		return []string{"see its volumes"}
	}
	return out
}
