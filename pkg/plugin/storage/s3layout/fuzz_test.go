package s3layout

import (
	"reflect"
	"strings"
	"testing"
)

// Fuzz targets of the s3:// URL and --input/--output-path grammar (make fuzz-short, make fuzz).
// These values travel: submit parses them, writes them one per line into the pod's environment,
// and the stager parses them again, so an accepted value must read back the same.

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/key", "s3://bucket/prefix/", "s3://bucket", "s3://bucket/", "s3://b/k", "s3://my.bucket-1/a/b/c.txt",
		"s3://bucket/a//b", "s3://bucket/./a", "s3://bucket/a/..", "http://bucket/key", "s3://Bucket/k", "s3://bucket/a\nb",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURL(s)
		if err != nil {
			if u != (URL{}) {
				t.Fatalf("ParseURL(%q) refused it (%v) but returned %+v", s, err, u)
			}
			return
		}
		if u.String() != s {
			t.Fatalf("ParseURL(%q) = %+v, which writes back as %q", s, u, u.String())
		}
		if err := ValidateBucket(u.Bucket); err != nil {
			t.Fatalf("ParseURL(%q) accepted bucket %q: %v", s, u.Bucket, err)
		}
		if u.Key == "" || strings.HasPrefix(u.Key, "/") || strings.ContainsAny(u.Key, "\n\r\x00") {
			t.Fatalf("ParseURL(%q) accepted key %q", s, u.Key)
		}
		if u.IsPrefix() != strings.HasSuffix(s, "/") {
			t.Fatalf("ParseURL(%q): IsPrefix = %v", s, u.IsPrefix())
		}
	})
}

func FuzzParseInput(f *testing.F) {
	for _, s := range []string{
		"/data=s3://bucket/train/", "/data/x.tar=s3://bucket/x.tar", "data=s3://bucket/x", "/=s3://bucket/x",
		"/a/../b=s3://bucket/x", "/a=b=s3://bucket/x", "/data", "/data=s3://bucket/x\n/other=s3://bucket/y/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseInput(s)
		if err != nil {
			if in != (Input{}) {
				t.Fatalf("ParseInput(%q) refused it (%v) but returned %+v", s, err, in)
			}
			if !strings.Contains(err.Error(), "--input") {
				t.Fatalf("ParseInput(%q): the error does not name the flag: %v", s, err)
			}
		} else {
			if in.String() != s {
				t.Fatalf("ParseInput(%q) = %+v, which writes back as %q", s, in, in.String())
			}
			if err := ValidateContainerPath(in.Path); err != nil {
				t.Fatalf("ParseInput(%q) accepted path %q: %v", s, in.Path, err)
			}
		}
		// The pod's TAO_STAGE_INPUTS: what submit encodes, the stager decodes unchanged.
		var ins []Input
		for _, line := range strings.Split(s, "\n") {
			if in, err := ParseInput(line); err == nil {
				ins = append(ins, in)
			}
		}
		back, err := DecodeInputs(EncodeInputs(ins))
		if err != nil || !reflect.DeepEqual(back, ins) {
			t.Fatalf("inputs %+v encode as %q and decode as %+v, %v", ins, EncodeInputs(ins), back, err)
		}
	})
}

func FuzzOutputs(f *testing.F) {
	for _, s := range []string{"/results", "/results\n/logs/", "/a/./b", "relative", "/", "/a/..", "/a\x00b", "\n\n/x\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		paths, err := DecodeOutputs(s)
		if err != nil {
			if paths != nil {
				t.Fatalf("DecodeOutputs(%q) refused it (%v) but returned %q", s, err, paths)
			}
			return
		}
		if back, err := DecodeOutputs(EncodeOutputs(paths)); err != nil || !reflect.DeepEqual(back, paths) {
			t.Fatalf("outputs %q encode as %q and decode as %q, %v", paths, EncodeOutputs(paths), back, err)
		}
		for _, p := range paths {
			if err := ValidateContainerPath(p); err != nil {
				t.Fatalf("DecodeOutputs(%q) accepted %q: %v", s, p, err)
			}
			// Every output lands inside its own run's results prefix, never beside it.
			key, err := OutputKey("train", "uid-1", p)
			if err != nil || !strings.HasPrefix(key, "results/train/uid-1/") || len(key) <= len("results/train/uid-1/") {
				t.Fatalf("OutputKey(%q) = %q, %v", p, key, err)
			}
			for _, seg := range strings.Split(key, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("OutputKey(%q) = %q has segment %q", p, key, seg)
				}
			}
		}
	})
}

// The manifest is read back from S3, where anyone with the bucket's keys may have changed it:
// what ParseManifest accepts names only files of its rank, and writes back as it read.
func FuzzParseManifest(f *testing.F) {
	const prefix = "results/train/uid-1/"
	files := CheckpointFilesPrefix(prefix, 0)
	for _, s := range []string{
		`{"version":1,"rank":0,"files":[]}`,
		`{"version":1,"rank":0,"files":[{"key":"` + files + `a.pt","size":3,"written":"2026-03-01T10:00:00Z"}]}`,
		`{"version":1,"rank":0,"files":[{"key":"` + files + `a/../b","size":3,"written":"2026-03-01T10:00:00Z"}]}`,
		`{"version":2,"rank":0,"files":[]}`, `{"version":1,"rank":1}`, `{}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(prefix, 0, data)
		if err != nil {
			return
		}
		for _, mf := range m.Files {
			key, err := CheckpointFileKey(prefix, 0, mf.Path)
			if err != nil || key != mf.Key || !strings.HasPrefix(mf.Key, files) {
				t.Fatalf("ParseManifest accepted file %+v (key %q, %v)", mf, key, err)
			}
		}
		out, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseManifest(prefix, 0, out)
		if err != nil || len(back.Files) != len(m.Files) {
			t.Fatalf("manifest %s writes back as %s, which reads as %+v, %v", data, out, back, err)
		}
	})
}
