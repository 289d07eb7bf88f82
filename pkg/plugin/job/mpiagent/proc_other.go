//go:build !unix

package mpiagent

import "errors"

// ExecProcess runs only in a pod, which is Linux.
func ExecProcess([]string, bool, [2]string) error {
	return errors.New("an MPI job's processes run on Linux only")
}
