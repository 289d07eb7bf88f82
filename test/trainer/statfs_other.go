//go:build !linux

package main

import "errors"

type fsInfo struct {
	Tmpfs bool  `json:"tmpfs"`
	Bytes int64 `json:"bytes"`
}

// statFS is Linux-only: pods run on Linux, and elsewhere the info line leaves shm out.
func statFS(string) (fsInfo, error) { return fsInfo{}, errors.New("statfs: Linux only") }
