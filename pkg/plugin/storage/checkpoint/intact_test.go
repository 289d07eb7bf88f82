package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// safetensors builds a file in the safetensors format: the header's length, the JSON header,
// then the tensors' bytes.
func safetensors(header string, data []byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

// A file its writer did not finish is told by its content: a torch.save zip (the sample is a
// real one, written by torch 1.13's torch.save) without its end, a .safetensors shorter than its
// header says. Other files pass: their format cannot be checked.
func TestCutShort(t *testing.T) {
	pt, err := os.ReadFile(filepath.Join("testdata", "step-3.pt"))
	if err != nil {
		t.Fatal(err)
	}
	st := safetensors(`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8))
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"step-3.pt", pt, ""},
		{"step-3.pt", pt[:len(pt)-10], "without a readable central directory"},
		{"step-3.pt", pt[:len(pt)/2], "without a readable central directory"},
		{"model.safetensors", st, ""},
		{"model.safetensors", st[:len(st)-1], "with 7 bytes of tensors where its header describes 8"},
		{"model.safetensors", st[:20], "whose header says"},
		{"model.safetensors", st[:5], "shorter than its 8-byte header length"},
		{"model.safetensors", safetensors(`{"w":`, nil), "is not JSON"},
		{"notes.txt", []byte("half a line"), ""},
		{"empty.pt", nil, ""},
	} {
		got := cutShort(bytes.NewReader(tc.data), tc.name, int64(len(tc.data)))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s of %d bytes: cutShort = %q, want %q", tc.name, len(tc.data), got, tc.want)
		}
	}
}

// The last upload after a command that died while saving keeps the previous checkpoint: the
// truncated file is left out (said once in the log), the complete one is uploaded and named.
func TestFlushLeavesOutCutShortFiles(t *testing.T) {
	pt, err := os.ReadFile(filepath.Join("testdata", "step-3.pt"))
	if err != nil {
		t.Fatal(err)
	}
	s := s3fake.Start(t, s3fake.Options{})
	dir := t.TempDir()
	write(t, dir, "step-3.pt", string(pt), 1)
	write(t, dir, "step-6.pt", string(pt[:len(pt)/2]), 2)
	var log testbuf.Buffer
	u := &Uploader{Target: target(s, 0, dir), NoInotify: true, Log: &log}
	for range 2 {
		if err := u.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := manifest(t, s, 0); len(got) != 1 || got[0] != "step-3.pt" {
		t.Errorf("manifest %q, want only step-3.pt", got)
	}
	if n := strings.Count(log.String(), "left out step-6.pt: a zip file (torch.save) without a readable central directory"); n != 1 {
		t.Errorf("log says it %d times, want once:\n%s", n, log.String())
	}
	r, err := Restore(context.Background(), target(s, 1, t.TempDir()), &log)
	if err != nil || filepath.Base(r.Resume) != "step-3.pt" {
		t.Errorf("restore resumes from %q (%v), want step-3.pt", r.Resume, err)
	}
	if keys := s.Keys(s3layout.CheckpointFilesPrefix(prefix, 0)); len(keys) != 1 {
		t.Errorf("uploaded %q", keys)
	}
}
