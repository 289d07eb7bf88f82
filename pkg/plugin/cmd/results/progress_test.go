package results

import (
	"strings"
	"testing"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

func TestProgressShowsObjectsAndBytes(t *testing.T) {
	var w testbuf.Buffer
	p := newProgress(&w, 2, 3<<20)
	p.Bytes(1 << 20)
	p.Object()
	p.Bytes(2 << 20)
	p.Object()
	p.finish(true)
	out := w.String()
	if !strings.Contains(out, "2/2 objects") || !strings.Contains(out, "3.0 MiB") || !strings.HasSuffix(out, "\n") {
		t.Errorf("bar output %q", out)
	}
	if cmdutil.IsTerminal(&w) {
		t.Error("a buffer is a terminal")
	}
}
