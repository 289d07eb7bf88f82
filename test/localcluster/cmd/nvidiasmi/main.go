// Command nvidiasmi is /bin/nvidia-smi in the real node's test image (local/tao-test:1): it
// answers `--query-gpu=... --format=csv,...` for the GPUs in NVIDIA_VISIBLE_DEVICES with the
// values a test's script wrote to /tmp/nvidia-smi-stand-in, since the node has no GPU behind
// its devices. See package gpustandin. Built static (CGO_ENABLED=0).
package main

import (
	"os"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

func main() {
	data, _ := os.ReadFile(gpustandin.NvidiaSMIValuesFile) // missing: every GPU idle
	os.Exit(gpustandin.NvidiaSMI(os.Args[1:], os.Getenv("NVIDIA_VISIBLE_DEVICES"), gpustandin.ParseValues(data), os.Stdout))
}
