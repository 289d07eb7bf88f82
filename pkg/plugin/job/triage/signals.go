package triage

import (
	"fmt"
	"regexp"
	"strings"
)

// signalNames are the signals a training process typically dies of; a container that dies of
// signal N exits with 128+N.
var signalNames = map[int32]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
	14: "SIGALRM", 15: "SIGTERM",
}

// signalOf names the signal behind an exit code of 128+N, or "".
func signalOf(code int32) string {
	if code > 128 {
		return signalNames[code-128]
	}
	return ""
}

// describeExit renders an exit code the way people search for it: "exit code 139 (SIGSEGV)".
func describeExit(code int32) string {
	if s := signalOf(code); s != "" {
		return fmt.Sprintf("exit code %d (%s)", code, s)
	}
	return fmt.Sprintf("exit code %d", code)
}

// exitSuggestion says what a non-zero exit usually means and what to do.
func exitSuggestion(code int32, job string, rank int) string {
	logs := fmt.Sprintf("Read the rank's last log lines: kubectl tao logs %s --rank %d.", job, rank)
	switch signalOf(code) {
	case "SIGKILL":
		return "The process was killed (SIGKILL) without an OOM report: usually memory outside the container's cgroup " +
			"accounting, or something killed it. Reduce batch size or request more memory. " + logs
	case "SIGSEGV", "SIGBUS", "SIGILL":
		return "The process crashed (" + signalOf(code) + "): usually a native extension, a CUDA/driver mismatch " +
			"or too little /dev/shm for DataLoader workers. " + logs
	case "SIGABRT":
		return "The process aborted (SIGABRT): a failed assertion or an uncaught C++ exception (CUDA, NCCL). " + logs
	case "SIGTERM", "SIGINT", "SIGHUP":
		return "The process was asked to stop (" + signalOf(code) + "): a cancel, a node drain or the program's own " +
			"timeout. If nobody stopped it, look for the rank that failed first. " + logs
	}
	switch code {
	case 127:
		return "The command was not found (exit code 127): the image lacks the program, or PATH does not reach it. " +
			"Check the command after \"--\" against the image. " + logs
	case 126:
		return "The command cannot be executed (exit code 126): the file is not executable or is not a program for " +
			"this platform. " + logs
	case 2:
		return "The command was used wrongly (exit code 2): a usage error of bash or argparse, or python could not " +
			"open its script. Check the arguments and paths. " + logs
	}
	return fmt.Sprintf("The training command exited with code %d. %s", code, logs)
}

// logPattern is an error the training program prints before it dies.
type logPattern struct {
	name       string
	re         *regexp.Regexp
	suggestion string
}

// logPatterns are checked in order; the first match names the finding.
var logPatterns = []logPattern{
	{
		name: "CUDAOutOfMemory",
		re:   regexp.MustCompile(`(?i)CUDA out of memory|torch\.cuda\.OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED`),
		suggestion: "GPU memory ran out (CUDA out of memory). Reduce batch size, lower max_length, enable mixed " +
			"precision or gradient checkpointing, or use GPUs with more memory.",
	},
	{
		name: "NCCLError",
		re:   regexp.MustCompile(`NCCL error|NCCL WARN|ncclSystemError|ncclInternalError|ncclRemoteError|ncclUnhandledCudaError|DistBackendError|ProcessGroupNCCL.*(?i:timeout|timed out)|Watchdog caught collective operation timeout`),
		suggestion: "NCCL communication failed. If another rank failed first, fix that rank. Otherwise check that " +
			"pods reach MASTER_ADDR:MASTER_PORT, set NCCL_SOCKET_IFNAME / NCCL_IB_HCA for the nodes' network " +
			"(--env), and rerun with --env NCCL_DEBUG=INFO.",
	},
	{
		// The launcher's own words when one process or a whole pod of its world is gone
		// (OpenMPI 4's mpirun, MPICH's hydra), each naming the host, which is the pod.
		name: "MPIPeerLost",
		re: regexp.MustCompile(`Remote daemon: \[\[\d+,\d+\],\d+\] on node \S+|` +
			`mpirun noticed that process rank \d+ with PID \d+ on node \S+ exited on signal|` +
			`PID \d+ RUNNING AT \S+`),
		suggestion: "mpirun lost a process of its world, or a whole pod's daemon, and ended the rest: the line names " +
			"the pod. Read that pod's log (kubectl tao logs JOB --rank N, N its number in the name) for why, and " +
			"diagnose the pod if it is gone. With --retries the whole MPI world starts again.",
	},
}

// scanLogs finds the first known error in a rank's last log lines.
func scanLogs(lines []string) (p *logPattern, line string) {
	for i := range logPatterns {
		for _, l := range lines {
			if logPatterns[i].re.MatchString(l) {
				return &logPatterns[i], strings.TrimSpace(l)
			}
		}
	}
	return nil, ""
}

// lastLine is the last non-blank log line: for a Python program, usually the exception.
func lastLine(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}
