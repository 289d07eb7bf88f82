package s3layout

import (
	"strings"
	"testing"
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
		if got := LogArchiveKey(p, rank); got != want {
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
