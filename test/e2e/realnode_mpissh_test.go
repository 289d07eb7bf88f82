//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// TestRealNodeMPISSH runs real mpirun over the image's own ssh and sshd (local/openmpi-ssh:1,
// Debian's openssh as the package sets it up, no key of its own), with the key pairs submit
// made for the job: the 4 processes all-reduce, each line in its own pod's log, and the job
// completes. In a looping job, ssh without the job's key is refused and said in the worker's
// log, stacks reads every pod's processes (rank 1's under sshd), and cancel stops them all. On
// an image without sshd the job fails at once, saying so.
func TestRealNodeMPISSH(t *testing.T) {
	n := stagerNode(t)
	image := packageImage(t, "OpenMPI with ssh", n.OpenMPISSHImage, n.OpenMPISSHImageSkip,
		"TAO_OPENMPI_SSH_IMAGE is not set (the launcher builds local/openmpi-ssh:1 where openmpi-bin, python3-mpi4py and openssh are installed)")
	t.Parallel()
	ns := namespace(t)
	flags := func(image, file string, extra ...string) []string {
		return append([]string{"--image", image, "--stager-image", n.StagerImage, "--nodes", "2", "--launcher", "mpi-ssh",
			"--file", file, "--slots-per-node", "2", "--shm-size", "1Gi"}, extra...)
	}

	t.Run("all-reduce", func(t *testing.T) {
		t.Parallel()
		const job = "sshreduce"
		start := time.Now()
		submitReal(t, n, ns, job, flags(image, scriptFile(t, "allreduce.py", mpiAllReduceScript)), mpirunCommand+"/opt/scripts/allreduce.py")
		waitComplete(t, ns, job)
		t.Logf("submit to Complete: %s", time.Since(start).Round(time.Millisecond))
		checkAllReduce(t, ns, job, true)
		// The daemon on rank 1's pod came in through its sshd, with the job's key.
		logs := tao(t, nil, "logs", job, "-n", ns, "--rank", "1")
		contains(t, logs, 0, "Accepted publickey for root from ", "ssh2: ED25519 SHA256:")
		t.Logf("rank 1's log:\n%s", lastLines(logs.stdout, 12))
	})

	t.Run("wrong-key-stacks-and-cancel", func(t *testing.T) {
		t.Parallel()
		const job = "sshloop"
		submitReal(t, n, ns, job, flags(image, scriptFile(t, "loop.py", mpiLoopScript)), mpirunCommand+"/opt/scripts/loop.py")
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "[rank 0] loop rank 0 on sshloop-0 step 1 world 4", "[rank 1] loop rank 3 on sshloop-1 step 1 world 4")

		// ssh from rank 0's pod with the job's known hosts and port, but without the job's key
		// (-F /dev/null: the job's settings would add it, as ssh adds up identity files).
		worker := job + "-1." + job
		r := tao(t, nil, "exec", job, "-n", ns, "--rank", "0", "--", "/bin/bash", "-c",
			"exec ssh -F /dev/null -p $TAO_MPI_SSH_PORT -o UserKnownHostsFile=/tao-mpi/known_hosts -o StrictHostKeyChecking=yes "+
				"-o BatchMode=yes -o IdentitiesOnly=yes -o IdentityFile=/nonexistent "+worker+" echo ran")
		contains(t, r, 255, "Permission denied (publickey)")
		if strings.Contains(r.stdout, "ran") {
			t.Errorf("the command ran without the job's key: %s", r)
		}
		refused := regexp.MustCompile(`Connection closed by authenticating user root [0-9.]+ port \d+ \[preauth\]`)
		poll(t, 30*time.Second, "the refusal in rank 1's log", func(_ context.Context) (bool, error) {
			return refused.MatchString(tao(t, nil, "logs", job, "-n", ns, "--rank", "1").stdout), nil
		})

		// Every pod's Python processes: rank 1's run under its sshd.
		st := tao(t, nil, "stacks", job, "-n", ns)
		for _, rank := range []string{"0", "1"} {
			if n := strings.Count(st.stdout, "[rank "+rank+"] --- process "); n != 2 {
				t.Errorf("stacks: %d processes of rank %s, want its 2 MPI processes:\n%s", n, rank, st)
			}
		}
		contains(t, st, 0, `[rank 1]   File "/opt/scripts/loop.py", line`)

		cancelQuickly(t, ns, job, 30, "mpirun, sshd and the processes they started")
		if r := follow.wait(t, 60*time.Second); r.code != 10 {
			t.Errorf("logs -f of the canceled job: want exit 10 (Canceled), got %s", r)
		}
	})

	t.Run("no-sshd", func(t *testing.T) {
		t.Parallel()
		const job = "nosshd"
		plain := openMPIImage(t, n)
		submitReal(t, n, ns, job, flags(plain, scriptFile(t, "allreduce.py", mpiAllReduceScript)), mpirunCommand+"/opt/scripts/allreduce.py")
		if err := pollErr(2*time.Minute, jobFinished(ns, job, batchv1.JobFailed)); err != nil {
			t.Fatalf("an mpi-ssh job on an image without sshd: %v\n%s", err, tao(t, nil, "logs", job, "-n", ns))
		}
		logs := tao(t, nil, "logs", job, "-n", ns, "--rank", "0")
		contains(t, logs, 0, "--launcher mpi-ssh runs the image's sshd, and the image has none", "or submit with --launcher mpi, which needs nothing in it")
		t.Logf("rank 0's log:\n%s", lastLines(logs.stdout, 4))
	})
}
