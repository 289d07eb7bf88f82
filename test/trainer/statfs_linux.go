package main

import "syscall"

// tmpfsMagic is TMPFS_MAGIC from linux/magic.h: a memory-backed emptyDir is a tmpfs.
const tmpfsMagic = 0x01021994

// fsInfo is what the info line says of a mount: whether it is memory-backed, and its size.
type fsInfo struct {
	Tmpfs bool  `json:"tmpfs"`
	Bytes int64 `json:"bytes"`
}

func statFS(path string) (fsInfo, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return fsInfo{}, err
	}
	return fsInfo{Tmpfs: st.Type == tmpfsMagic, Bytes: int64(st.Blocks) * st.Bsize}, nil
}
