package s3layout

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

const cpPrefix = "results/train/uid-1/"

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func mf(t *testing.T, rank int, rel string, size int64, minute int) ManifestFile {
	t.Helper()
	f, err := NewManifestFile(cpPrefix, rank, rel, size, t0.Add(time.Duration(minute)*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func paths[T any](xs []T, p func(T) string) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, p(x))
	}
	return out
}

func TestCheckpointLayout(t *testing.T) {
	// Beside the outputs and the log archive, in the tool's own folder of the run.
	if got := CheckpointRankPrefix(cpPrefix, 3); got != "results/train/uid-1/.kubectl-tao/checkpoints/rank-3/" {
		t.Errorf("rank prefix = %q", got)
	}
	if got := CheckpointManifestKey(cpPrefix, 0); got != "results/train/uid-1/.kubectl-tao/checkpoints/rank-0/manifest.json" {
		t.Errorf("manifest = %q", got)
	}
	if !strings.HasPrefix(CheckpointsPrefix(cpPrefix), cpPrefix+ToolDir+"/") || strings.HasPrefix(CheckpointsPrefix(cpPrefix), LogArchivePrefix(cpPrefix)) {
		t.Errorf("checkpoints %q beside logs %q", CheckpointsPrefix(cpPrefix), LogArchivePrefix(cpPrefix))
	}
	// A user's file named manifest.json is a file, never the manifest.
	key, err := CheckpointFileKey(cpPrefix, 0, "manifest.json")
	if err != nil || key == CheckpointManifestKey(cpPrefix, 0) || key != "results/train/uid-1/.kubectl-tao/checkpoints/rank-0/files/manifest.json" {
		t.Errorf("file key = %q, %v", key, err)
	}
	for rel, wantErr := range map[string]string{
		"epoch-3.pth":           "",
		"dcp/step-10/.metadata": "",
		"":                      "empty",
		".":                     "empty",
		"/abs.pt":               "relative",
		"a/../b.pt":             `".."`,
		"..":                    `".."`,
		"a//b.pt":               "not clean",
		"a/./b.pt":              "not clean",
		"a/":                    "not clean",
		"a\nb":                  "control character",
	} {
		_, err := CheckpointFileKey(cpPrefix, 0, rel)
		if (wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("CheckpointFileKey(%q) = %v; want %q", rel, err, wantErr)
		}
	}
	for p, wantErr := range map[string]string{
		"/ckpt": "", "ckpt": "absolute", "/": "whole file system", "/ckpt/": "not clean", "/.kubectl-tao/x": "tool's own",
	} {
		err := ValidateCheckpointDir(p)
		if (wantErr == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "--checkpoint-dir")) {
			t.Errorf("ValidateCheckpointDir(%q) = %v; want %q", p, err, wantErr)
		}
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := Manifest{Rank: 1, Files: []ManifestFile{mf(t, 1, "z.pt", 10, 2), mf(t, 1, "a/b.pth", 0, 1)}}
	data, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := EncodeManifest(Manifest{Rank: 1, Files: []ManifestFile{m.Files[1], m.Files[0]}})
	if string(again) != string(data) {
		t.Errorf("the same files in another order encode differently:\n%s\n%s", data, again)
	}
	got, err := ParseManifest(cpPrefix, 1, data)
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{Version: ManifestVersion, Rank: 1, Files: []ManifestFile{m.Files[1], m.Files[0]}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseManifest = %+v; want %+v", got, want)
	}
	if empty, err := EncodeManifest(Manifest{Rank: 0}); err != nil || !strings.Contains(string(empty), `"files": []`) {
		t.Errorf("empty manifest = %s, %v", empty, err)
	}
}

func TestParseManifestErrors(t *testing.T) {
	k := func(rank int, rel string) string { return CheckpointFilesPrefix(cpPrefix, rank) + rel }
	const w = `"written":"2026-03-01T10:00:00Z"`
	for _, tc := range []struct{ data, wantErr string }{
		{`{"version":1,"rank":0,"files":[]}`, ""},
		{``, "not a manifest"},
		{`[]`, "not a manifest"},
		{`{"version":1,"rank":0,"files":[]} {}`, "data after"},
		{`{"version":1,"rank":0,"files":[],"extra":1}`, "unknown field"},
		{`{"rank":0,"files":[]}`, "no version"},
		{`{"version":2,"rank":0,"files":[],"sealed":["global_step5"]}`, ""},
		{`{"version":3,"rank":0,"files":[]}`, "version 3, but this kubectl-tao reads version 2"},
		{`{"version":2,"rank":0,"files":[],"sealed":["../x"]}`, "sealed unit"},
		{`{"version":1,"rank":1,"files":[]}`, "it says rank 1"},
		{`{"version":1,"rank":0,"files":[{"key":"` + k(1, "a.pt") + `","size":1,` + w + `}]}`, "is not under"},
		{`{"version":1,"rank":0,"files":[{"key":"results/other/a.pt","size":1,` + w + `}]}`, "is not under"},
		{`{"version":1,"rank":0,"files":[{"key":"` + k(0, "a/../b.pt") + `","size":1,` + w + `}]}`, `".."`},
		{`{"version":1,"rank":0,"files":[{"key":"` + k(0, "a.pt") + `","size":-1,` + w + `}]}`, "negative size"},
		{`{"version":1,"rank":0,"files":[{"key":"` + k(0, "a.pt") + `","size":1}]}`, "no write time"},
		{`{"version":1,"rank":0,"files":[{"key":"` + k(0, "a.pt") + `","size":1,` + w + `},{"key":"` + k(0, "a.pt") + `","size":2,` + w + `}]}`, "listed twice"},
		{`{"version":1,"rank":0,"files":[{"key":"` + k(0, "a") + `","size":1,` + w + `},{"key":"` + k(0, "a/b.pt") + `","size":2,` + w + `}]}`, `"a/b.pt" is below file "a"`},
	} {
		_, err := ParseManifest(cpPrefix, 0, []byte(tc.data))
		if (tc.wantErr == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "checkpoint manifest of rank 0")) {
			t.Errorf("ParseManifest(%s) = %v; want %q", tc.data, err, tc.wantErr)
		}
	}
}

func TestCheckpointPatterns(t *testing.T) {
	if err := ValidateCheckpointPatterns(DefaultCheckpointPatterns); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in      []string
		wantErr string
	}{
		{[]string{"model_*.bin", "last"}, ""},
		{nil, "no pattern"},
		{[]string{" "}, "empty pattern"},
		{[]string{"ckpt_*/", "*.bin"}, ""},
		{[]string{"ckpt/*.pt"}, `never a path`},
		{[]string{"/"}, `never a path`},
		{[]string{"a/b/"}, `never a path`},
		{[]string{"[a-"}, "syntax error"},
		{[]string{"a\nb"}, "control character"},
	} {
		err := ValidateCheckpointPatterns(tc.in)
		if (tc.wantErr == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--checkpoint-pattern")) {
			t.Errorf("ValidateCheckpointPatterns(%q) = %v; want %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestAttemptOf(t *testing.T) {
	logs := LogArchivePrefix(cpPrefix)
	objs := []ArchivedObject{
		{logs + "rank-0.train-0-aaaaa.log", t0.Add(1 * time.Minute)},
		{logs + "rank-0.train-0-bbbbb.log", t0.Add(5 * time.Minute)},
		{logs + "rank-1.train-1-ccccc.log", t0.Add(2 * time.Minute)},
		{cpPrefix + "results/out.txt", t0},
	}
	for _, tc := range []struct {
		rank int
		pod  string
		want int
	}{
		{0, "train-0-aaaaa", 1}, // as `logs --attempt 1` reads it
		{0, "train-0-bbbbb", 2},
		{0, "train-0-zzzzz", 3}, // a new attempt, not archived yet
		{1, "train-1-ddddd", 2},
		{2, "train-2-eeeee", 1}, // a first attempt
		{0, "", 3},
	} {
		if got := AttemptOf(cpPrefix, tc.rank, tc.pod, objs); got != tc.want {
			t.Errorf("AttemptOf(rank %d, %q) = %d; want %d", tc.rank, tc.pod, got, tc.want)
		}
		// The same numbering as logs --attempt.
		for _, a := range LogArchiveAttempts(cpPrefix, objs) {
			if a.Rank == tc.rank && a.Pod == tc.pod && a.Attempt != tc.want {
				t.Errorf("logs numbers %s attempt %d, AttemptOf %d", a.Pod, a.Attempt, tc.want)
			}
		}
	}

	// The wrapper's records count the attempts that archived no log, in the same order.
	record := func(rank int, pod string, at time.Duration) ArchivedObject {
		k, err := CheckpointAttemptKey(cpPrefix, rank, pod)
		if err != nil {
			t.Fatal(err)
		}
		return ArchivedObject{k, t0.Add(at)}
	}
	objs = append(objs,
		record(0, "train-0-aaaaa", 0),              // also archived: counted once
		record(0, "train-0-xxxxx", 6*time.Minute),  // killed before its first upload
		record(1, "train-1-ccccc", 30*time.Second), // also archived
		record(1, "train-1-yyyyy", 10*time.Minute)) // --no-log-archive
	for _, tc := range []struct {
		rank int
		pod  string
		want int
	}{
		{0, "train-0-aaaaa", 1},
		{0, "train-0-bbbbb", 2},
		{0, "train-0-xxxxx", 3},
		{0, "train-0-zzzzz", 4},
		{1, "train-1-ccccc", 1},
		{1, "train-1-yyyyy", 2},
		{1, "train-1-ddddd", 3},
	} {
		if got := AttemptOf(cpPrefix, tc.rank, tc.pod, objs); got != tc.want {
			t.Errorf("with records: AttemptOf(rank %d, %q) = %d; want %d", tc.rank, tc.pod, got, tc.want)
		}
	}
	if _, err := CheckpointAttemptKey(cpPrefix, 0, "Bad/Pod"); err == nil {
		t.Error("CheckpointAttemptKey took a key-breaking pod name")
	}
}

// A rank's prefix holds its own archived logs, the pod-less legacy one included, and none of
// rank 10's.
func TestLogArchiveRankPrefix(t *testing.T) {
	p := LogArchiveRankPrefix(cpPrefix, 1)
	for key, want := range map[string]bool{
		LogArchiveKey(cpPrefix, 1, "train-1-aaaaa"):   true,
		LogArchivePrefix(cpPrefix) + "rank-1.log":     true,
		LogArchiveKey(cpPrefix, 10, "train-10-aaaaa"): false,
		LogArchiveKey(cpPrefix, 0, "train-0-aaaaa"):   false,
	} {
		if got := strings.HasPrefix(key, p); got != want {
			t.Errorf("%s under %s: %v, want %v", key, p, got, want)
		}
	}
}
