package localcluster

import "syscall"

// mntDetach lazily detaches a mount that is still busy.
const mntDetach = syscall.MNT_DETACH
