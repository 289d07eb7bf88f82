//go:build linux

package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watch is the close-after-write notification of files below dir (inotify), sent as their path
// below dir, and of directories moved into place, sent as their path with a "/" at its end; an
// error (no inotify, out of instances or watches) leaves the uploader to scan.
var watch = watchInotify

func watchInotify(dir string, out chan<- string) (stop func(), err error) {
	// Non-blocking, so that the runtime's poller reads it and Close ends a pending Read.
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	file := os.NewFile(uintptr(fd), "inotify")
	const dirMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_ONLYDIR
	var mu sync.Mutex
	dirs := map[int]string{}
	add := func(p string) error {
		wd, err := unix.InotifyAddWatch(fd, p, dirMask)
		if err != nil {
			return fmt.Errorf("inotify watch of %s: %w", p, err)
		}
		mu.Lock()
		dirs[wd] = p
		mu.Unlock()
		return nil
	}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		return add(p)
	})
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	done := make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); _ = file.Close() }) }
	go func() {
		buf := make([]byte, 64*1024)
		for {
			n, err := file.Read(buf)
			if err != nil || n <= 0 {
				return // closed by stop
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				name := strings.TrimRight(string(nameBytes), "\x00")
				mu.Lock()
				parent, ok := dirs[int(ev.Wd)]
				mu.Unlock()
				if !ok || name == "" {
					continue
				}
				p := filepath.Join(parent, name)
				rel, err := filepath.Rel(dir, p)
				if err != nil {
					continue
				}
				rel = filepath.ToSlash(rel)
				if ev.Mask&unix.IN_ISDIR != 0 {
					if ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
						_ = add(p) // a new subdirectory; the scan still sees what it missed
					}
					if ev.Mask&unix.IN_MOVED_TO == 0 {
						continue
					}
					// A directory renamed into place: the careful writer's sign that it is whole.
					rel += "/"
				} else if ev.Mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO) == 0 {
					continue
				}
				select {
				case out <- rel:
				case <-done:
					return
				default: // the channel is full: the next scan sees the file anyway
				}
			}
		}
	}()
	return stop, nil
}
