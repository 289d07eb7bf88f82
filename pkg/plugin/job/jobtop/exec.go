package jobtop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// execOutputLimit bounds what one exec keeps: nvidia-smi prints a line per GPU and the
// progress read a bounded tail, so more is a misbehaving command.
const execOutputLimit = 256 << 10

// RemoteExecutor runs commands through the API server's pods/exec, as kubectl exec does:
// WebSocket first, SPDY where the server or a proxy refuses the upgrade.
type RemoteExecutor struct {
	Client kubernetes.Interface
	Config *rest.Config
}

// Exec runs command in the container and returns its stdout; a non-zero exit is an error
// carrying the first line of its stderr.
func (e RemoteExecutor) Exec(ctx context.Context, namespace, pod, container string, command []string) ([]byte, error) {
	rc, ok := e.Client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil || e.Config == nil {
		// A fake clientset has no REST client to stream with.
		return nil, errors.New("this client cannot exec in pods")
	}
	req := rc.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(e.Config, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(e.Config, "GET", req.URL().String())
	if err != nil {
		return nil, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, err
	}
	stdout, stderr := &capped{max: execOutputLimit}, &capped{max: 4 << 10}
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}); err != nil {
		if msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n"); msg != "" {
			return stdout.Bytes(), fmt.Errorf("%w: %s", err, msg)
		}
		return stdout.Bytes(), err
	}
	return stdout.Bytes(), nil
}

// capped keeps the first max bytes written and drops the rest, so a chatty command cannot
// grow the client's memory.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		if len(p) > room {
			c.Buffer.Write(p[:room])
		} else {
			c.Buffer.Write(p)
		}
	}
	return len(p), nil
}
