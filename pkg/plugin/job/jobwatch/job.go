package jobwatch

import (
	"context"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
)

// Job follows one Job, by name, and the pods PodSelector selects (by the Job's name, or by
// its UID): one list of each, then one watch of each, whatever the number of pods.
type Job struct {
	Client          kubernetes.Interface
	Namespace, Name string
	PodSelector     string
	Retry           Retry
	// QuietPods retries the pods' failures other than an outage without a line.
	QuietPods bool
	// Fatal picks the failures that end following (an Update with Err); see Source.Fatal.
	Fatal func(err error, listing bool) bool
}

// List reads the Job and its pods, in parallel: the caller can act on them at once, then
// Start from the two versions returned. The errors are the lists' own.
func (j Job) List(ctx context.Context) (jobs []batchv1.Job, jobRV string, pods []corev1.Pod, podRV string, jobErr, podErr error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		jobs, jobRV, jobErr = ListJob(ctx, j.Client, j.Namespace, j.Name)
	}()
	pods, podRV, podErr = jobpods.ListSelected(ctx, j.Client, j.Namespace, j.PodSelector)
	wg.Wait()
	return jobs, jobRV, pods, podRV, jobErr, podErr
}

// Start follows the Job and its pods from jobRV and podRV (each "" lists first, and sends
// that list as a Resync) until ctx ends, sending their changes on the channel it returns.
func (j Job) Start(ctx context.Context, jobRV, podRV string) <-chan Update {
	out := make(chan Update, 64)
	jobs := JobSource(j.Client, j.Namespace, j.Name)
	jobs.Fatal = j.Fatal
	pods := PodSource(j.Client, j.Namespace, j.PodSelector, "the pods of job.batch/"+j.Name)
	pods.Fatal, pods.Quiet = j.Fatal, j.QuietPods
	go Run(ctx, jobRV, jobs, j.Retry, out)
	go Run(ctx, podRV, pods, j.Retry, out)
	return out
}

// State is what the lists and watches of a Job say now: the Job named Name (nil when absent)
// and the pods selected, by UID.
type State struct {
	Name string
	Job  *batchv1.Job
	Pods map[types.UID]*corev1.Pod
	// Listed is set for the Job once its list has come (JobListed) and for the pods once
	// theirs has (PodsListed): before, their absence says nothing.
	JobListed, PodsListed bool
}

// NewState returns the empty state of the Job named name.
func NewState(name string) *State {
	return &State{Name: name, Pods: map[types.UID]*corev1.Pod{}}
}

// SetJobs records a list of Jobs: the one named Name, if any.
func (s *State) SetJobs(jobs []batchv1.Job) {
	s.Job, s.JobListed = nil, true
	for i := range jobs {
		if jobs[i].Name == s.Name {
			s.Job = &jobs[i]
		}
	}
}

// SetPods records a list of pods: they replace those known.
func (s *State) SetPods(pods []corev1.Pod) {
	clear(s.Pods)
	s.PodsListed = true
	for i := range pods {
		s.Pods[pods[i].UID] = &pods[i]
	}
}

// Apply records one update. (An update with Err changes nothing: it is the caller's to end.)
func (s *State) Apply(u Update) {
	switch {
	case u.Err != nil:
	case u.Resync && u.Pod:
		clear(s.Pods)
		s.PodsListed = true
		for _, o := range u.Objects {
			if p, ok := o.(*corev1.Pod); ok {
				s.Pods[p.UID] = p
			}
		}
	case u.Resync:
		s.Job, s.JobListed = nil, true
		for _, o := range u.Objects {
			if j, ok := o.(*batchv1.Job); ok && j.Name == s.Name {
				s.Job = j
			}
		}
	case u.Pod:
		p, ok := u.Event.Object.(*corev1.Pod)
		if !ok {
			return
		}
		if u.Event.Type == watch.Deleted {
			delete(s.Pods, p.UID)
		} else {
			s.Pods[p.UID] = p
		}
	default:
		j, ok := u.Event.Object.(*batchv1.Job)
		if !ok || j.Name != s.Name {
			return
		}
		if u.Event.Type == watch.Deleted {
			if s.Job != nil && s.Job.UID == j.UID {
				s.Job = nil
			}
			return
		}
		s.Job = j
	}
}

// Owned returns the pods known that uid's Job controls, unordered.
func (s *State) Owned(uid types.UID) []corev1.Pod {
	var pods []corev1.Pod
	for _, p := range s.Pods {
		if jobpods.Owned(p, uid) {
			pods = append(pods, *p)
		}
	}
	return pods
}

// Drain applies the updates already queued on updates, without waiting: one decision per
// burst of events. It returns the first update with Err, if any.
func (s *State) Drain(updates <-chan Update) error {
	for {
		select {
		case u := <-updates:
			if u.Err != nil {
				return u.Err
			}
			s.Apply(u)
		default:
			return nil
		}
	}
}
