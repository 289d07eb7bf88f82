package results

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is --download's bar: objects, bytes, rate and ETA, redrawn in place on stderr.
type progress struct {
	bar   *progressbar.ProgressBar
	total int
	done  atomic.Int64
	w     io.Writer
}

func newProgress(w io.Writer, objects int, bytes int64) *progress {
	p := &progress{total: objects, w: w}
	p.bar = progressbar.NewOptions64(bytes,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(p.describe(0)),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionFullWidth(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionShowCount(),
		progressbar.OptionUseIECUnits(true),
	)
	return p
}

func (p *progress) describe(done int64) string { return fmt.Sprintf("%d/%d objects", done, p.total) }

// Bytes is s3.TreeProgress's.
func (p *progress) Bytes(n int64) { _ = p.bar.Add64(n) }

// Object is s3.TreeProgress's.
func (p *progress) Object() { p.bar.Describe(p.describe(p.done.Add(1))) }

// finish draws the final state (full when every object is there, else where it stopped) and
// ends the bar's line, so that later stderr lines start clean.
func (p *progress) finish(complete bool) {
	if complete {
		_ = p.bar.Finish()
	}
	_ = p.bar.Exit()
	fmt.Fprintln(p.w)
}
