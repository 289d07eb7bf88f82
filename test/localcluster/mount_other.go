//go:build !linux

package localcluster

// mntDetach has no meaning where the real node cannot run (it needs Linux); the launcher still
// builds there, and up --real-node says why it cannot start the node.
const mntDetach = 0
