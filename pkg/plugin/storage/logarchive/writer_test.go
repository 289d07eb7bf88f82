package logarchive

import (
	"errors"
	"strings"
	"testing"
)

func TestWriterKeepsWholeLinesInTheOrderTheyEnd(t *testing.T) {
	var out strings.Builder
	w := NewWriter(&out)
	stdout, stderr := w.Stream(), w.Stream()
	for _, step := range []struct {
		s    *Stream
		data string
	}{
		{stdout, "epoch 1 lo"},      // unfinished: held back
		{stderr, "warning: slow\n"}, // a whole stderr line goes first
		{stdout, "ss 0.5\nepoch 2"}, // the stdout line ends now
		{stderr, "tqdm 10%\rtqdm 20%\r"},
		{stdout, " loss 0.4\n"},
	} {
		if n, err := step.s.Write([]byte(step.data)); n != len(step.data) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", step.data, n, err)
		}
	}
	want := "warning: slow\nepoch 1 loss 0.5\ntqdm 10%\rtqdm 20%\repoch 2 loss 0.4\n"
	if out.String() != want || w.Size() != int64(len(want)) {
		t.Errorf("archive %q (size %d), want %q", out.String(), w.Size(), want)
	}
}

func TestWriterCloseKeepsPartialLastLines(t *testing.T) {
	for _, tc := range []struct {
		name           string
		stdout, stderr string
		want           string
	}{
		{"none", "a\n", "b\n", "a\nb\n"},
		{"stdout only, kept without a newline", "a\nlast", "", "a\nlast"},
		{"both: they do not run together", "a\nout", "err", "a\nout\nerr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			w := NewWriter(&out)
			o, e := w.Stream(), w.Stream()
			_, _ = o.Write([]byte(tc.stdout))
			_, _ = e.Write([]byte(tc.stderr))
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("archive %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestWriterBoundsAnEndlessLine(t *testing.T) {
	var out strings.Builder
	w := NewWriter(&out)
	s := w.Stream()
	big := strings.Repeat("x", maxPartial+1)
	_, _ = s.Write([]byte(big))
	if out.Len() != len(big) || len(s.partial) != 0 {
		t.Errorf("archived %d bytes, held %d; want all %d archived", out.Len(), len(s.partial), len(big))
	}
}

type failAfter struct {
	n   int
	buf strings.Builder
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.buf.Len()+len(p) > f.n {
		return 0, errors.New("no space left on device")
	}
	return f.buf.Write(p)
}

// A full disk under the archive stops the archive, never the command's output.
func TestWriterErrorStaysInTheArchive(t *testing.T) {
	f := &failAfter{n: 4}
	w := NewWriter(f)
	s := w.Stream()
	for _, l := range []string{"one\n", "two\n", "three\n"} {
		if n, err := s.Write([]byte(l)); n != len(l) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", l, n, err)
		}
	}
	if f.buf.String() != "one\n" || w.Err() == nil || w.Close() == nil || w.Size() != 4 {
		t.Errorf("archive %q, err %v, size %d", f.buf.String(), w.Err(), w.Size())
	}
}
