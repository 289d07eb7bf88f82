//go:build e2e

package e2e

import "testing"

// TestRealNodeStuckImagePull: an image on a loopback registry that is not there, on the real
// kubelet. It flips the container between ErrImagePull and ImagePullBackOff at each retry of
// the pull; wait says the issue once all the same, and gives up after --stuck-timeout with 12.
func TestRealNodeStuckImagePull(t *testing.T) {
	n := realNode(t)
	ns := namespace(t)
	const image = "127.0.0.1:1/absent:1"
	submitReal(t, n, ns, "absent", []string{"--image", image}, "true")
	r := tao(t, nil, "wait", "absent", "-n", ns, "--stuck-timeout", "30s")
	contains(t, r, 12, "could not start for 30s (--stuck-timeout)", image)
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	saidOnce(t, r, ns, "absent", "ErrImagePull: ", "ImagePullBackOff: ")
}
