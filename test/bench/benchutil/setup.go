package benchutil

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Tools are the flags every benchmark takes: how many timed runs, and the two binaries it
// compares. They hold their values once Main has parsed the flags.
type Tools struct {
	Runs         int
	Tao, Kubectl string
}

// ToolFlags defines -runs (default runs; what says what one run is), -tao and -kubectl.
func ToolFlags(runs int, what string) *Tools {
	t := &Tools{}
	flag.IntVar(&t.Runs, "runs", runs, what+"; the median is reported")
	flag.StringVar(&t.Tao, "tao", "bin/kubectl-tao", "the kubectl-tao binary")
	flag.StringVar(&t.Kubectl, "kubectl", "kubectl", "the kubectl binary")
	return t
}

// Main parses the flags, then runs run; an error ends the process with status 1.
func Main(run func() error) {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name(), err)
		os.Exit(1)
	}
}

// name is the benchmark's command name (go run names the binary after the package).
func name() string { return filepath.Base(os.Args[0]) }

// Config is the cluster of $KUBECONFIG, the local cluster the benchmark runs on.
func Config() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
}

// Namespace creates a namespace named prefix-XXXXX for one run of a benchmark, waits for its
// default ServiceAccount, and returns its
// name and a function that deletes it (a failure to is reported: the results stand).
func Namespace(ctx context.Context, client kubernetes.Interface, prefix string) (string, func(), error) {
	ns := prefix + "-" + rand.String(5)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return "", nil, err
	}
	// Pods cannot be created before the namespace's default ServiceAccount exists.
	for {
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ns, func() {
		if err := client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "%s: deleting namespace %s: %v\n", name(), ns, err)
		}
	}, nil
}

// PrintSetting prints the head of every report: the machine, and the load average before and
// after the timed runs (a busy machine makes the numbers worth less).
func PrintSetting(loadBefore, loadAfter string) {
	fmt.Printf("machine: %s\n", Machine())
	fmt.Printf("load average before the timed runs: %s; after: %s\n\n", loadBefore, loadAfter)
}
