// Command taoprof runs one kubectl-tao command line in-process, several times, under the CPU
// profiler, to see where a command's own time goes (start-up is measured apart, with
// GODEBUG=inittrace=1). stdout is discarded.
//
//	KUBECONFIG=... go run ./test/bench/taoprof -n 5 -cpuprofile /tmp/logs.pprof -- logs J -n NS
//	go tool pprof -top /tmp/logs.pprof
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin"
)

func main() {
	n := flag.Int("n", 5, "runs")
	cpu := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *cpu != "" {
		f, err := os.Create(*cpu)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	for i := 0; i < *n; i++ {
		start := time.Now()
		code := plugin.Execute(context.Background(), plugin.Deps{
			Streams:    genericiooptions.IOStreams{In: os.Stdin, Out: io.Discard, ErrOut: os.Stderr},
			Getenv:     os.Getenv,
			RandomName: func() string { return "prof0" },
		}, flag.Args())
		fmt.Fprintf(os.Stderr, "run %d: exit %d in %s\n", i+1, code, time.Since(start).Round(time.Millisecond))
	}
}
