// Package jobcreate creates a job's objects atomically for `kubectl tao submit`: the Job
// suspended, its children owned by it, then the Job resumed (or handed to Kueue), and on any
// failure everything it made deleted again. It also holds submit's guards that read the
// cluster before anything is made: the capacity check and the --s3-secret check. It never
// prints: warnings come back as text for the command to show.
package jobcreate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/nodeusage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// rollbackTimeout bounds the cleanup after a failed submit. It runs on a fresh context because
// the user's may be the very thing that was canceled (Ctrl-C).
const rollbackTimeout = 30 * time.Second

// CheckCapacity refuses a job the cluster's allocatable GPUs can never hold. Users who may not
// list nodes (common for namespace-scoped users) go on: warning says why nothing was checked
// ("" when it was).
func CheckCapacity(ctx context.Context, client kubernetes.Interface, s jobspec.Spec) (warning string, err error) {
	return CheckRequest(ctx, client, gpufit.RequestFor(&s))
}

// CheckRequest is CheckCapacity of a request: a spec's, or a Job's at a new size (scale).
func CheckRequest(ctx context.Context, client kubernetes.Interface, req gpufit.Request) (warning string, err error) {
	_, warning, err = checkNodes(ctx, client, req)
	return warning, err
}

// checkNodes is CheckRequest, returning the nodes it listed (nil when it may not list them) for
// a caller that reads them again (ElasticStart).
func checkNodes(ctx context.Context, client kubernetes.Interface, req gpufit.Request) ([]corev1.Node, string, error) {
	nodes, err := nodeusage.ListNodes(ctx, client, "")
	if apierrors.IsForbidden(err) {
		return nil, fmt.Sprintf("capacity check skipped: you may not list nodes (%v)", apierrors.ReasonForError(err)), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing nodes for the capacity check (skip it with --no-capacity-check): %w", err)
	}
	if err := gpufit.Check(gpufit.Summarize(nodes, req), req); err != nil {
		return nil, "", exitcode.WithCode(exitcode.NoCapacity, err)
	}
	return nodes, "", nil
}

// Create makes the objects atomically: the Job suspended (so no pod starts before its
// children exist), then each child owned by the Job, then the Job resumed. If any step fails,
// whatever was created is deleted again, by UID, and the error returned.
//
// A queued Job (--queue) is created suspended and without its queue label, so that Kueue
// ignores it while its children are made; the last step adds the label instead of resuming,
// and the Job stays suspended until Kueue admits it (Kueue resumes it, starting every rank at
// once). Kueue therefore never sees the Job before its Service and ConfigMaps exist.
//
// A server dry run sends every object with DryRunAll and stops there: nothing was stored, so
// nothing is resumed or rolled back, and the Job is shown as it would run (not suspended, or
// queued: suspended and labelled).
//
// before, when not nil, runs once the Job and its children exist and the Job is still
// suspended (the --workdir upload, which needs the Job's UID); if a later step fails, its undo
// runs with the rollback.
func Create(ctx context.Context, client kubernetes.Interface, objs jobspec.Objects, serverDryRun bool, before BeforeStart) (out jobspec.Objects, err error) {
	opts := metav1.CreateOptions{FieldManager: "kubectl-tao"}
	if serverDryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	queue := jobspec.Queued(objs.Job)
	job := objs.Job.DeepCopy()
	if queue != "" && !serverDryRun {
		job = jobspec.Unqueued(objs.Job)
	}
	job.Spec.Suspend = ptr.To(queue != "" || !serverDryRun)
	if !serverDryRun {
		// Until the last step removes it, the mark tells status, list and diagnose that this
		// suspended Job is a submit in progress, or one that never finished (IncompleteSubmit).
		metav1.SetMetaDataAnnotation(&job.ObjectMeta, jobspec.SubmittingAnnotation, "true")
	}
	jobs := client.BatchV1().Jobs(job.Namespace)
	created, err := jobs.Create(ctx, job, opts)
	if err != nil {
		return out, explainCreate(job.Namespace, "job.batch/"+job.Name, err)
	}
	var made []runtime.Object
	var undo func(context.Context) error
	defer func() {
		if err != nil && !serverDryRun {
			rbErr := rollback(client, created, made)
			if undo != nil {
				rbErr = errors.Join(rbErr, undoFresh(undo))
			}
			if rbErr != nil {
				err = fmt.Errorf("%w\nremoving what was already created also failed, delete it by hand "+
					"(kubectl delete job %s -n %s): %w", err, created.Name, created.Namespace, rbErr)
			} else {
				// Say it: a user who sees an error mid-submit otherwise cannot know whether a
				// half-made job is left behind.
				err = fmt.Errorf("%w\n(nothing was left behind: the objects already created were deleted again)", err)
			}
		}
	}()

	out.Job = created
	for _, child := range objs.Children {
		c, err := createChild(ctx, client, child, created, opts)
		if err != nil {
			return out, err
		}
		made = append(made, c)
		out.Children = append(out.Children, c)
	}
	if serverDryRun {
		out.Job.Spec.Suspend = objs.Job.Spec.Suspend
		return withTypes(out), nil
	}
	if before != nil {
		if undo, err = before(ctx, created); err != nil {
			return out, err
		}
	}
	// The UID in the patch is a precondition: it fails instead of resuming (or queueing) a
	// same-name Job that replaced ours. The same patch removes the in-progress mark (null
	// deletes a key in a merge patch), so no Job is ever started yet still marked.
	meta := map[string]any{"uid": created.UID, "annotations": map[string]any{jobspec.SubmittingAnnotation: nil}}
	change := map[string]any{"metadata": meta, "spec": map[string]any{"suspend": false}}
	verb := "starting"
	if queue != "" {
		// Only the label: spec.suspend stays true, Kueue admits by resuming.
		meta["labels"] = map[string]string{jobspec.QueueLabel: queue}
		change = map[string]any{"metadata": meta}
		verb = "queueing"
	}
	patch, _ := json.Marshal(change)
	resumed, err := jobs.Patch(ctx, created.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-tao"})
	if err != nil {
		return out, fmt.Errorf("%s job.batch/%s: %w", verb, created.Name, err)
	}
	out.Job = resumed
	return withTypes(out), nil
}

// BeforeStart is a step of Create that needs the created Job (see Create); undo reverses it.
type BeforeStart func(ctx context.Context, job *batchv1.Job) (undo func(context.Context) error, err error)

// undoFresh runs undo on a fresh context, as rollback does.
func undoFresh(undo func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	return undo(ctx)
}

func createChild(ctx context.Context, client kubernetes.Interface, child runtime.Object, owner *batchv1.Job, opts metav1.CreateOptions) (runtime.Object, error) {
	switch c := child.(type) {
	case *corev1.Secret:
		c = c.DeepCopy()
		jobspec.SetOwner(c, owner)
		made, err := client.CoreV1().Secrets(c.Namespace).Create(ctx, c, opts)
		if err != nil {
			return nil, explainCreate(c.Namespace, "secret/"+c.Name, err)
		}
		return made, nil
	case *corev1.ConfigMap:
		c = c.DeepCopy()
		jobspec.SetOwner(c, owner)
		made, err := client.CoreV1().ConfigMaps(c.Namespace).Create(ctx, c, opts)
		if err != nil {
			return nil, explainCreate(c.Namespace, "configmap/"+c.Name, err)
		}
		return made, nil
	case *corev1.Service:
		c = c.DeepCopy()
		jobspec.SetOwner(c, owner)
		made, err := client.CoreV1().Services(c.Namespace).Create(ctx, c, opts)
		if err != nil {
			return nil, explainCreate(c.Namespace, "service/"+c.Name, err)
		}
		return made, nil
	}
	return nil, fmt.Errorf("internal error: no create for %T", child)
}

// rollback deletes what a failed submit made, newest first. Each delete carries the object's
// UID as a precondition, so an object of the same name made by someone else is never touched.
// The Job goes in the foreground: its children and pods are removed before it disappears.
func rollback(client kubernetes.Interface, job *batchv1.Job, children []runtime.Object) error {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	var errs []error
	for i := len(children) - 1; i >= 0; i-- {
		var err error
		switch c := children[i].(type) {
		case *corev1.Service:
			err = client.CoreV1().Services(c.Namespace).Delete(ctx, c.Name, deleteOptions(c.UID))
		case *corev1.ConfigMap:
			err = client.CoreV1().ConfigMaps(c.Namespace).Delete(ctx, c.Name, deleteOptions(c.UID))
		case *corev1.Secret:
			err = client.CoreV1().Secrets(c.Namespace).Delete(ctx, c.Name, deleteOptions(c.UID))
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	err := client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, deleteOptions(job.UID))
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func deleteOptions(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
	}
}

// explainCreate names the object a failed create was for, and turns a missing namespace into a
// message that says so (the raw error speaks of the object, not the namespace).
func explainCreate(namespace, what string, err error) error {
	if apierrors.IsNotFound(err) {
		if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil && st.Status().Details.Kind == "namespaces" {
			return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("namespace %q not found: create it or pick another with -n", namespace))
		}
	}
	if apierrors.IsAlreadyExists(err) {
		return exitcode.WithCode(exitcode.AlreadyExists, fmt.Errorf("%s already exists in namespace %q: choose another NAME (nothing was changed)", what, namespace))
	}
	return fmt.Errorf("creating %s: %w", what, err)
}

// CheckS3Secret reads the --s3-secret once: it must exist and hold the keys staging needs, or
// the pods would fail to start (CreateContainerConfigError) long after submit said yes. Users
// who may not read Secrets go on, with warning saying so ("" otherwise): the kubelet may still
// read it for them. No value is ever shown.
func CheckS3Secret(ctx context.Context, client kubernetes.Interface, ns, name string) (warning string, err error) {
	s, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("--s3-secret %s not checked: you may not read Secrets in namespace %s (%v); if it is missing or lacks a key, the pods will not start",
			name, ns, apierrors.ReasonForError(err)), nil
	case apierrors.IsNotFound(err):
		return "", exitcode.WithCode(exitcode.NotFound, fmt.Errorf("--s3-secret: secret/%s not found in namespace %s: create it with the keys %s "+
			"(e.g. kubectl create secret generic %s -n %s --from-env-file=FILE, which keeps the keys off the command line)",
			name, ns, strings.Join(s3layout.CredentialKeys, ", "), name, ns))
	case err != nil:
		return "", fmt.Errorf("reading --s3-secret secret/%s: %w", name, err)
	}
	creds := map[string]string{}
	for k, v := range s.Data {
		creds[k] = string(v)
	}
	if errs := jobspec.ValidateCredentials(creds, "in secret/"+name, "add them to the Secret"); len(errs) > 0 {
		return "", fmt.Errorf("--s3-secret: %w", errors.Join(errs...))
	}
	return "", nil
}

// withTypes restores apiVersion and kind, which the typed client leaves empty on returned objects.
func withTypes(o jobspec.Objects) jobspec.Objects {
	o.Job.APIVersion, o.Job.Kind = "batch/v1", "Job"
	for _, c := range o.Children {
		switch c := c.(type) {
		case *corev1.Service:
			c.APIVersion, c.Kind = "v1", "Service"
		case *corev1.ConfigMap:
			c.APIVersion, c.Kind = "v1", "ConfigMap"
		case *corev1.Secret:
			c.APIVersion, c.Kind = "v1", "Secret"
		}
	}
	return o
}
