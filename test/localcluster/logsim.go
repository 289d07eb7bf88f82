package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// LogSim writes the simulated container logs kwok serves. kwok only reads files named by Logs
// objects, so for every pod whose containers have started it creates one Logs object (owned by
// the pod, so the garbage collector removes it with the pod) and appends the pod's lines to one
// file per container as simulated time passes.
type LogSim struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Dir holds the log files, <Dir>/<namespace>/<pod>_<uid>/<container>.log.
	Dir string
	// Tick is how often lines that fell due are appended.
	Tick time.Duration
	// Errors receives problems that must not stop the daemon (a pod's bad annotation, a
	// failed write); the daemon logs them.
	Errors io.Writer
	Now    func() time.Time

	mu   sync.Mutex
	pods map[types.UID]*simPod
}

type simPod struct {
	namespace, name string
	uid             types.UID
	spec            LogSpec
	containers      []string
	start           time.Time
	end             *time.Time
	written         int
	logsObject      bool
}

func (s *simPod) dir(root string) string {
	return filepath.Join(root, s.namespace, s.name+"_"+string(s.uid))
}

// Run watches pods until ctx ends.
func (l *LogSim) Run(ctx context.Context) error {
	if l.Now == nil {
		l.Now = time.Now
	}
	if l.Tick == 0 {
		l.Tick = 100 * time.Millisecond
	}
	if l.Errors == nil {
		l.Errors = io.Discard
	}
	l.pods = map[types.UID]*simPod{}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return fmt.Errorf("create pod log directory: %w", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(l.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName!="
	}))
	inf := factory.Core().V1().Pods().Informer()
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.observe(obj); notify() },
		UpdateFunc: func(_, obj any) { l.observe(obj); notify() },
		DeleteFunc: func(obj any) { l.forget(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("sync pod cache: %w", ctx.Err())
	}
	t := time.NewTicker(l.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-kick:
		}
		l.flush(ctx)
	}
}

// containerTimes returns when the pod's containers started and, if they have, ended. kwok
// moves all containers of a pod together, so the first one that started speaks for the pod.
func containerTimes(pod *corev1.Pod) (start time.Time, end *time.Time, ok bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		switch {
		case cs.State.Running != nil:
			return cs.State.Running.StartedAt.Time, nil, true
		case cs.State.Terminated != nil:
			e := cs.State.Terminated.FinishedAt.Time
			return cs.State.Terminated.StartedAt.Time, &e, true
		}
	}
	return time.Time{}, nil, false
}

func (l *LogSim) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	start, end, started := containerTimes(pod)
	if !started {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	sp, known := l.pods[pod.UID]
	if !known {
		spec, errs := LogSpecFor(pod)
		for _, err := range errs {
			fmt.Fprintf(l.Errors, "pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
		}
		// startedAt has whole-second precision; pacing lines from it would write the first
		// ones up to a second early. When the start is fresh, the moment we saw it is the
		// better clock; after a daemon restart the recorded start is all there is.
		if now := l.Now(); end == nil && now.After(start) && now.Sub(start) < 2*time.Second {
			start = now
		}
		sp = &simPod{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, spec: spec, start: start}
		for _, c := range pod.Spec.Containers {
			sp.containers = append(sp.containers, c.Name)
		}
		// After a daemon restart the file already holds some steps; carry on after them.
		if data, err := os.ReadFile(filepath.Join(sp.dir(l.Dir), sp.containers[0]+".log")); err == nil {
			sp.written = bytes.Count(data, []byte("\n"))
		}
		l.pods[pod.UID] = sp
	}
	if end != nil && sp.end == nil {
		sp.end = end
	}
}

func (l *LogSim) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	l.mu.Lock()
	sp := l.pods[pod.UID]
	delete(l.pods, pod.UID)
	l.mu.Unlock()
	if sp != nil {
		_ = os.RemoveAll(sp.dir(l.Dir))
	}
}

// flush appends the steps that fell due and creates missing Logs objects.
func (l *LogSim) flush(ctx context.Context) {
	now := l.Now()
	l.mu.Lock()
	var work []*simPod
	for _, sp := range l.pods {
		work = append(work, sp)
	}
	l.mu.Unlock()
	for _, sp := range work {
		l.mu.Lock()
		until := now
		if sp.end != nil && sp.end.Before(until) {
			until = *sp.end
		}
		due := sp.spec.DueSteps(sp.start, until)
		from := sp.written
		needObject := !sp.logsObject
		l.mu.Unlock()
		if due <= from && !needObject {
			continue
		}
		if err := l.writeSteps(sp, from, due); err != nil {
			fmt.Fprintf(l.Errors, "pod %s/%s: %v\n", sp.namespace, sp.name, err)
			continue
		}
		if needObject {
			if err := l.applyLogsObject(ctx, sp); err != nil {
				fmt.Fprintf(l.Errors, "pod %s/%s: %v\n", sp.namespace, sp.name, err)
			}
		}
		l.mu.Lock()
		sp.written = max(sp.written, due)
		if needObject {
			sp.logsObject = true
		}
		l.mu.Unlock()
	}
}

func (l *LogSim) writeSteps(sp *simPod, from, to int) error {
	dir := sp.dir(l.Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	text := sp.spec.RenderSteps(sp.start, from, to)
	for _, c := range sp.containers {
		f, err := os.OpenFile(filepath.Join(dir, c+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open log of container %s: %w", c, err)
		}
		// One write per batch so a follower never sees half a line.
		_, werr := f.WriteString(text)
		cerr := f.Close()
		if werr != nil {
			return fmt.Errorf("append to log of container %s: %w", c, werr)
		}
		if cerr != nil {
			return fmt.Errorf("close log of container %s: %w", c, cerr)
		}
	}
	return nil
}

// LogsObject is the kwok Logs object pointing kwok at a pod's log files.
func LogsObject(namespace, name string, uid types.UID, containers []string, dir string) *unstructured.Unstructured {
	var logs []any
	for _, c := range containers {
		logs = append(logs, map[string]any{
			"containers": []any{c},
			"logsFile":   filepath.Join(dir, c+".log"),
			"follow":     true,
		})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Logs",
		"metadata": map[string]any{
			"name":      name,
			"namespace": namespace,
			"ownerReferences": []any{map[string]any{
				"apiVersion": "v1",
				"kind":       "Pod",
				"name":       name,
				"uid":        string(uid),
			}},
		},
		"spec": map[string]any{"logs": logs},
	}}
}

func (l *LogSim) applyLogsObject(ctx context.Context, sp *simPod) error {
	obj := LogsObject(sp.namespace, sp.name, sp.uid, sp.containers, sp.dir(l.Dir))
	return apply(ctx, l.Dynamic, logsGVR, obj)
}

// RunLogsim runs the log daemon for the cluster in stateDir until ctx ends.
func RunLogsim(ctx context.Context, stateDir string, errs io.Writer) error {
	cfg, err := RESTConfig(KubeconfigPath(stateDir))
	if err != nil {
		return err
	}
	cfg.Timeout = 0 // watches are long-lived
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create dynamic client: %w", err)
	}
	sim := &LogSim{Client: cs, Dynamic: dyn, Dir: podLogsDir(stateDir), Errors: errs}
	return sim.Run(ctx)
}
