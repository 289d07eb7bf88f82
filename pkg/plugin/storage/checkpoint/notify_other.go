//go:build !linux

package checkpoint

import "errors"

// watch has no inotify here: the uploader scans.
var watch = func(string, chan<- string) (func(), error) {
	return nil, errors.New("inotify is Linux only")
}
