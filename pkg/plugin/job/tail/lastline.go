package tail

import (
	"bytes"
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// lastLineLimit bounds the read of a container's last line: a line longer than this (a
// progress bar redrawn with carriage returns) still has its timestamp at the start.
const lastLineLimit = 16 << 10

// LastOutput is when the container of t last wrote a line: one log request (the last line,
// stamped by the kubelet). ok is false for a container that has written nothing yet.
func LastOutput(ctx context.Context, client kubernetes.Interface, namespace string, t Target) (ts time.Time, ok bool, err error) {
	one, limit := int64(1), int64(lastLineLimit)
	raw, err := client.CoreV1().Pods(namespace).GetLogs(t.Pod, &corev1.PodLogOptions{
		Container: t.Container, TailLines: &one, Timestamps: true, LimitBytes: &limit,
	}).DoRaw(ctx)
	if err != nil {
		return time.Time{}, false, err
	}
	ts, ok = lastStamp(raw)
	return ts, ok, nil
}

// lastStamp is the timestamp of the last stamped line of a log read with timestamps=true.
func lastStamp(raw []byte) (time.Time, bool) {
	for _, line := range bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n")) {
		if _, ts, _, ok := splitTimestamp(line); ok {
			return ts, true
		}
	}
	return time.Time{}, false
}
