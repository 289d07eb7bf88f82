package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestInotifyInstancesWanted(t *testing.T) {
	for _, tc := range []struct{ nodes, want int }{
		{0, 1024},
		{4, 1024},                  // 440 + 256: the minimum
		{8, 1136},                  // 880 + 256
		{12, 12*PodsPerNode + 256}, // the heavy fault tests' cluster: room for 1,320 followed logs
		{5000, 65536},              // the capacity benchmark: the maximum
	} {
		if got := InotifyInstancesWanted(tc.nodes); got != tc.want {
			t.Errorf("InotifyInstancesWanted(%d) = %d, want %d", tc.nodes, got, tc.want)
		}
	}
}

func TestRaiseInotifyInstances(t *testing.T) {
	denied := func(string, string) error { return &fs.PathError{Op: "open", Path: "x", Err: fs.ErrPermission} }
	for _, tc := range []struct {
		name      string
		have      string // the setting's value; "" for none
		write     func(name, value string) error
		wantValue string
		wantLines []string // fragments, one per line said
	}{
		{name: "raised where it may", have: "128", wantValue: "1024", wantLines: []string{"raised fs.inotify.max_user_instances from 128 to 1024"}},
		{name: "never lowered", have: "8192", wantValue: "8192"},
		{name: "already enough", have: "1024", wantValue: "1024"},
		{name: "not allowed: says what it limits and how to raise it", have: "128", write: denied, wantValue: "128",
			wantLines: []string{"fs.inotify.max_user_instances is 128: kwok serves each followed log with an inotify instance, so `logs -f` of more than about 128 ranks" +
				" at once (fewer, as other processes hold some) fails with \"too many open files\"; raise it with: sudo sysctl -w fs.inotify.max_user_instances=1024"}},
		{name: "another error is said too", have: "128", write: func(string, string) error { return errors.New("read-only file system") }, wantValue: "128",
			wantLines: []string{"could not raise fs.inotify.max_user_instances: read-only file system", "sudo sysctl -w fs.inotify.max_user_instances=1024"}},
		{name: "no such setting (not Linux): nothing to say"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := tc.have
			read := func(name string) (string, bool) {
				if name != "fs.inotify.max_user_instances" {
					t.Fatalf("read %s", name)
				}
				return value, value != ""
			}
			write := tc.write
			if write == nil {
				write = func(name, v string) error { value = v; return nil }
			}
			var said []string
			raiseInotifyInstances(1024, read, write, func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) })
			if len(said) != len(tc.wantLines) {
				t.Fatalf("said %d lines, want %d: %q", len(said), len(tc.wantLines), said)
			}
			for i, want := range tc.wantLines {
				if !strings.Contains(said[i], want) {
					t.Errorf("line %d: %q, want it to contain %q", i, said[i], want)
				}
			}
			if value != tc.wantValue {
				t.Errorf("the setting is %q, want %q", value, tc.wantValue)
			}
		})
	}
}
