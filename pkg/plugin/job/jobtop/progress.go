package jobtop

import (
	"bytes"
	"context"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/progress"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// progressTail is how much of the end of the progress file is read: many lines of TAO's
// status.json, whose lines are short.
const progressTail = 64 << 10

// progressScript prints the progress file's size, then its last progressTail bytes. A path
// ending in / is a directory: the newest status.json in it or one level below (TAO tasks write
// theirs in /results/train and the like). A missing file prints nothing. An image with a shell
// but no coreutils (a Python image built from packages) runs progressPython, given as $2.
const progressScript = `f=$1
if ! command -v tail >/dev/null 2>&1 || ! command -v ls >/dev/null 2>&1; then
  command -v python3 >/dev/null 2>&1 && exec python3 -c "$2" "$f"
  exit 0
fi
case $f in */) d=${f%/}; f=$(ls -t "$d/status.json" "$d"/*/status.json 2>/dev/null | head -n 1);; esac
[ -n "$f" ] && [ -f "$f" ] || exit 0
wc -c < "$f"
tail -c 65536 "$f"`

// progressPython is progressScript in Python.
const progressPython = `import glob, os, sys
f = sys.argv[1]
if f.endswith("/"):
    d = f[:-1]
    found = [p for p in [d + "/status.json"] + glob.glob(d + "/*/status.json") if os.path.isfile(p)]
    f = max(found, key=os.path.getmtime) if found else ""
if f and os.path.isfile(f):
    with open(f, "rb") as r:
        n = os.fstat(r.fileno()).st_size
        r.seek(max(0, n - 65536))
        sys.stdout.write("%d\n" % n)
        sys.stdout.flush()
        sys.stdout.buffer.write(r.read())
`

// StatusFileOf is where a job's progress file is looked for: the job's --status-file (a file),
// else a directory to search (ending in /): the first --output-path, else /results. ok is false
// when the job was submitted with --status-file="".
func StatusFileOf(job *batchv1.Job) (spec string, ok bool) {
	if v, set := job.Annotations[jobspec.StatusFileAnnotation]; set {
		return v, v != ""
	}
	if outs, err := s3layout.DecodeOutputs(job.Annotations[s3layout.AnnotationOutputs]); err == nil && len(outs) > 0 && outs[0] != "" {
		return strings.TrimSuffix(outs[0], "/") + "/", true
	}
	return jobspec.ResultsPath + "/", true
}

// readProgress reads the progress file in rank 0 with one exec; nil when there is none, or
// the image has no shell: no progress is no error.
func (r *Reader) readProgress(ctx context.Context, namespace string, rank0 Rank, spec string) *progress.Progress {
	out, err := r.Exec.Exec(ctx, namespace, rank0.Pod, rank0.container, []string{"/bin/sh", "-c", progressScript, "sh", spec, progressPython})
	if err != nil || len(out) == 0 {
		return nil
	}
	return parseProgressOutput(out)
}

// parseProgressOutput reads what progressScript printed.
func parseProgressOutput(out []byte) *progress.Progress {
	first, rest, found := bytes.Cut(out, []byte("\n"))
	if !found {
		return nil
	}
	size, err := strconv.ParseInt(strings.TrimSpace(string(first)), 10, 64)
	if err != nil {
		return nil
	}
	p, err := progress.Parse(rest, size <= progressTail)
	if err != nil {
		return nil
	}
	return p
}
