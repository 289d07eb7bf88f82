// Command kubectl-tao is the kubectl plugin `kubectl tao`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := plugin.Execute(ctx, plugin.Deps{
		Streams:    genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
		Getenv:     os.Getenv,
		RandomName: func() string { return rand.String(5) },
	}, plugin.Args(os.Args))
	stop()
	os.Exit(code)
}
