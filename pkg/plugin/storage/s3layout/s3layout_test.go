package s3layout

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    URL
		prefix  bool
		wantErr string
	}{
		{in: "s3://data/train/x.tar", want: URL{"data", "train/x.tar"}},
		{in: "s3://my.bucket-1/train/", want: URL{"my.bucket-1", "train/"}, prefix: true},
		{in: "http://data/x", wantErr: "not an s3:// URL"},
		{in: "s3://data", wantErr: "names no key"},
		{in: "s3://data/", wantErr: "names no key"},
		{in: "s3://Data/x", wantErr: "bucket name"},
		{in: "s3://ab/x", wantErr: "3 to 63"},
		{in: "s3://-ab/x", wantErr: "start and end"},
		{in: "s3://a..b/x", wantErr: `".."`},
		{in: "s3://data/a//b", wantErr: "empty segment"},
		{in: "s3://data//b", wantErr: "empty segment"},
		{in: "s3://data/a/../b", wantErr: `".."`},
		{in: "s3://data/./b", wantErr: `"."`},
		{in: "s3://data/a\nb", wantErr: "control character"},
	} {
		got, err := ParseURL(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseURL(%q) err = %v; want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || got.IsPrefix() != tc.prefix || got.String() != tc.in {
			t.Errorf("ParseURL(%q) = %+v, %v (prefix %v)", tc.in, got, err, got.IsPrefix())
		}
	}
}

func TestContainerPathsAndInputs(t *testing.T) {
	for p, wantErr := range map[string]string{
		"/data":        "",
		"/a/b.txt":     "",
		"":             "empty",
		"data":         "absolute",
		"/":            "whole file system",
		"/a/../b":      `".."`,
		"/a/./b":       "not clean",
		"/a/":          "not clean",
		"/a\nb":        "control character",
		"/a//b":        "not clean",
		"/results/..":  `".."`,
		"/x/..hidden/": "not clean",
	} {
		err := ValidateContainerPath(p)
		if (wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ValidateContainerPath(%q) = %v; want %q", p, err, wantErr)
		}
	}
	ins := []Input{{"/data/train", URL{"b01", "ds/train/"}}, {"/spec.yaml", URL{"b01", "spec.yaml"}}}
	got, err := DecodeInputs("\n" + EncodeInputs(ins) + "\n")
	if err != nil || len(got) != 2 || got[0] != ins[0] || got[1] != ins[1] {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	if _, err := ParseInput("/data"); err == nil || !strings.Contains(err.Error(), "CONTAINER_PATH=s3://") {
		t.Errorf("ParseInput without = : %v", err)
	}
	if _, err := DecodeOutputs("/ok\nrelative"); err == nil {
		t.Error("DecodeOutputs accepted a relative path")
	}
}

func TestResultsLayout(t *testing.T) {
	p, err := ResultsPrefix("train-1", "0b6c-uid")
	if err != nil || p != "results/train-1/0b6c-uid/" {
		t.Fatalf("ResultsPrefix = %q, %v", p, err)
	}
	k, err := OutputKey("train-1", "0b6c-uid", "/results/model")
	if err != nil || k != "results/train-1/0b6c-uid/results/model" || strings.Contains(k, "//") {
		t.Fatalf("OutputKey = %q, %v", k, err)
	}
	for _, bad := range [][2]string{{"", "u"}, {"j", ""}, {"..", "u"}, {"j", "a/b"}} {
		if _, err := ResultsPrefix(bad[0], bad[1]); err == nil {
			t.Errorf("ResultsPrefix(%q, %q) accepted", bad[0], bad[1])
		}
	}
	if _, err := OutputKey("j", "u", "/a/../../etc"); err == nil {
		t.Error("OutputKey accepted a path escaping with ..")
	}
	for rank, want := range map[int]string{0: "results/train-1/0b6c-uid/.kubectl-tao/logs/rank-0.log", 12: "results/train-1/0b6c-uid/.kubectl-tao/logs/rank-12.log"} {
		if got := LogArchiveKey(p, rank, ""); got != want {
			t.Errorf("LogArchiveKey(%q, %d) = %q, want %q", p, rank, got, want)
		}
	}
}

func TestDefaultStagerImage(t *testing.T) {
	for v, want := range map[string]string{
		"v1.2.3":            "ghcr.io/kubectl-tao/kubectl-tao:v1.2.3",
		"v0.4.0":            "ghcr.io/kubectl-tao/kubectl-tao:v0.4.0",
		"v2.0.0-rc.1":       "ghcr.io/kubectl-tao/kubectl-tao:v2.0.0-rc.1",
		"v0.0.0-dev":        "",
		"v0.0.0-a3e01cd":    "",
		"v1.2.3-4-gabc1234": "",
		"v1.2.3-dirty":      "",
		"1.2.3":             "",
		"v01.2.3":           "",
	} {
		got, ok := DefaultStagerImage(v)
		if got != want || ok != (want != "") {
			t.Errorf("DefaultStagerImage(%q) = %q, %v; want %q", v, got, ok, want)
		}
	}
}

func TestOutputPathSpellings(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{in: "/results", want: "/results"},
		{in: "/results/", want: "/results"}, // the SDK's outputs=['/results/']
		{in: "/a/b//", want: "/a/b"},
		{in: "/", wantErr: "whole file system"},
		{in: "//", wantErr: "whole file system"},
		{in: "results/", wantErr: "must be absolute"},
		{in: "/a/../b/", wantErr: `may not contain ".."`},
		{in: "/a/..", wantErr: `may not contain ".."`},
		{in: "/a//b/", wantErr: "not clean"},
		{in: "/.kubectl-tao", wantErr: "under /.kubectl-tao"},
		{in: "/.kubectl-tao/logs/", wantErr: "under /.kubectl-tao"},
		{in: "/.kubectl-taox", want: "/.kubectl-taox"},
		{in: "/data/.kubectl-tao", want: "/data/.kubectl-tao"},
	} {
		got := CleanOutputPath(tc.in)
		err := ValidateOutputPath(got)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: cleaned %q, err %v; want %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: cleaned %q, err %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := DecodeOutputs("/results\n/.kubectl-tao/x"); err == nil {
		t.Error("the stager accepted an output under /.kubectl-tao")
	}
}

func TestRunsAndLogArchiveKeys(t *testing.T) {
	runs, err := RunsPrefix("train")
	if err != nil || runs != "results/train/" {
		t.Fatalf("RunsPrefix = %q, %v", runs, err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := RunsPrefix(bad); err == nil {
			t.Errorf("RunsPrefix(%q) accepted", bad)
		}
	}
	for key, want := range map[string]string{
		"results/train/uid-1/results/model.pth": "uid-1",
		"results/train/uid-2/":                  "uid-2",
		"results/train/stray":                   "",
		"results/train-2/uid-1/x":               "",
		"results/train/../x/y":                  "",
	} {
		if got := RunUID(runs, key); got != want {
			t.Errorf("RunUID(%q) = %q; want %q", key, got, want)
		}
	}
	prefix, _ := ResultsPrefix("train", "uid-1")
	for _, c := range []struct {
		rank int
		pod  string
		want string
	}{
		{3, "train-abcde", "results/train/uid-1/.kubectl-tao/logs/rank-3.train-abcde.log"},
		{0, "train-0-x7k2p", "results/train/uid-1/.kubectl-tao/logs/rank-0.train-0-x7k2p.log"},
		{1, "a.b", "results/train/uid-1/.kubectl-tao/logs/rank-1.a.b.log"},
		// No pod name (a pod spec from before TAO_POD_NAME) or one no pod can have: the
		// one-object-per-rank key of before.
		{3, "", "results/train/uid-1/.kubectl-tao/logs/rank-3.log"},
		{3, "a/b", "results/train/uid-1/.kubectl-tao/logs/rank-3.log"},
		{3, "Pod", "results/train/uid-1/.kubectl-tao/logs/rank-3.log"},
		{3, "-x", "results/train/uid-1/.kubectl-tao/logs/rank-3.log"},
		{3, "x.", "results/train/uid-1/.kubectl-tao/logs/rank-3.log"},
		{3, strings.Repeat("a", 254), "results/train/uid-1/.kubectl-tao/logs/rank-3.log"},
	} {
		if got := LogArchiveKey(prefix, c.rank, c.pod); got != c.want {
			t.Errorf("LogArchiveKey(%d, %q) = %q, want %q", c.rank, c.pod, got, c.want)
		}
	}
	bad := LogArchiveEntry{Rank: -1}
	for key, want := range map[string]LogArchiveEntry{
		LogArchiveKey(prefix, 0, ""):                       {Rank: 0},
		LogArchiveKey(prefix, 12, ""):                      {Rank: 12},
		LogArchiveKey(prefix, 12, "train-12-abc"):          {Rank: 12, Pod: "train-12-abc"},
		LogArchiveKey(prefix, 2, "log"):                    {Rank: 2, Pod: "log"},
		prefix + ".kubectl-tao/logs/rank-2.a.log.log":      {Rank: 2, Pod: "a.log"},
		prefix + ".kubectl-tao/logs/rank-007.log":          bad,
		prefix + ".kubectl-tao/logs/rank-.log":             bad,
		prefix + ".kubectl-tao/logs/rank-.pod.log":         bad,
		prefix + ".kubectl-tao/logs/rank--1.log":           bad,
		prefix + ".kubectl-tao/logs/rank-1.txt":            bad,
		prefix + ".kubectl-tao/logs/rank-1..log":           bad,
		prefix + ".kubectl-tao/logs/rank-1.Pod.log":        bad,
		prefix + ".kubectl-tao/logs/rank-1.p/q.log":        bad,
		prefix + ".kubectl-tao/logs/x/rank-1.log":          bad,
		"results/train/uid-0/.kubectl-tao/logs/rank-1.log": bad,
	} {
		got, ok := ParseLogArchiveKey(prefix, key)
		if (want.Rank >= 0) != ok || (ok && got != want) {
			t.Errorf("ParseLogArchiveKey(%q) = %+v, %v; want %+v", key, got, ok, want)
		}
	}
}

func TestLogArchiveAttempts(t *testing.T) {
	prefix, _ := ResultsPrefix("train", "uid-1")
	at := func(min int) time.Time { return time.Date(2026, 12, 1, 21, min, 0, 0, time.UTC) }
	objs := []ArchivedObject{
		{Key: prefix + "results/model.pth", LastModified: at(9)},
		{Key: LogArchiveKey(prefix, 1, "train-1-ccc"), LastModified: at(8)},
		{Key: LogArchiveKey(prefix, 0, "train-0-bbb"), LastModified: at(7)},
		{Key: LogArchiveKey(prefix, 0, "train-0-zzz"), LastModified: at(3)},
		{Key: LogArchiveKey(prefix, 10, "train-10-aaa"), LastModified: at(1)},
		{Key: LogArchiveKey(prefix, 1, "train-1-bbb"), LastModified: at(8)},
		{Key: LogArchiveKey(prefix, 1, "train-1-aaa"), LastModified: at(2)},
		{Key: prefix + ".kubectl-tao/workdir.tar.zst", LastModified: at(0)},
	}
	got := LogArchiveAttempts(prefix, objs)
	type short struct {
		rank, attempt int
		pod           string
	}
	var gotShort []short
	for _, a := range got {
		if a.Key != LogArchiveKey(prefix, a.Rank, a.Pod) {
			t.Errorf("attempt %+v: key does not match its rank and pod", a)
		}
		gotShort = append(gotShort, short{a.Rank, a.Attempt, a.Pod})
	}
	// Rank order; within a rank, by last write (the later pod wrote last), keys breaking ties.
	want := []short{
		{0, 1, "train-0-zzz"}, {0, 2, "train-0-bbb"},
		{1, 1, "train-1-aaa"}, {1, 2, "train-1-bbb"}, {1, 3, "train-1-ccc"},
		{10, 1, "train-10-aaa"},
	}
	if !reflect.DeepEqual(gotShort, want) {
		t.Errorf("LogArchiveAttempts =\n%+v\nwant\n%+v", gotShort, want)
	}
	if got := LogArchiveAttempts(prefix, nil); len(got) != 0 {
		t.Errorf("no objects: %+v", got)
	}
}
