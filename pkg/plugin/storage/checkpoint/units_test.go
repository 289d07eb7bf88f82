package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// exists reports whether rel is a file below dir.
func exists(dir, rel string) bool {
	_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	return err == nil
}

func sealedOf(t *testing.T, s *s3fake.Server, rank int) []string {
	t.Helper()
	m, err := s3layout.ParseManifest(prefix, rank, []byte(s.Get(s3layout.CheckpointManifestKey(prefix, rank))))
	if err != nil {
		t.Fatal(err)
	}
	return m.Sealed
}

// An HF-shaped job killed while it saved checkpoint-5, after its model: the restore brings back
// checkpoint-4 whole and nothing of checkpoint-5, and the command resumes from checkpoint-4.
func TestRestoreHuggingFaceUnitWhole(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	hf := []string{"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}
	// A whole .safetensors file: its header's length, the header, no tensors.
	const safetensors = "\x02\x00\x00\x00\x00\x00\x00\x00{}"
	for i, n := range hf {
		body := "4 " + n
		if n == "model.safetensors" {
			body = safetensors
		}
		write(t, dir, "checkpoint-4/"+n, body, 1+i)
	}
	write(t, dir, "checkpoint-5/model.safetensors", safetensors, 9)
	up := &Uploader{Target: target(s, 0, dir), NoInotify: true}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	var log testbuf.Buffer
	r, err := Restore(ctx, target(s, 0, fresh), &log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Resume != filepath.Join(fresh, "checkpoint-4") || r.ResumeUnit.Layout != s3layout.LayoutHuggingFace || r.Units != 1 {
		t.Errorf("Restore = resume %q, unit %+v, %d units", r.Resume, r.ResumeUnit, r.Units)
	}
	for _, n := range hf {
		if !exists(fresh, "checkpoint-4/"+n) {
			t.Errorf("checkpoint-4/%s not restored", n)
		}
	}
	if exists(fresh, "checkpoint-5/model.safetensors") {
		t.Error("the unit cut short was restored")
	}
	if !strings.Contains(log.String(), "resume checkpoint: "+filepath.Join(fresh, "checkpoint-4")+" (huggingface checkpoint-4, 5 files, ") {
		t.Errorf("log:\n%s", log.String())
	}
}

// A DeepSpeed-shaped 2-rank job whose ranks each write their shard into global_stepN/: rank 0's
// `latest` names global_step5, global_step10 was cut short before it. Both ranks restore the
// whole tag, `latest` names the tag resumed from, and the command is told the load directory.
func TestRestoreDeepSpeedShardsOnEveryRank(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	d0, d1 := t.TempDir(), t.TempDir()
	write(t, d0, "ds/global_step5/mp_rank_00_model_states.pt", "model 5", 1)
	write(t, d0, "ds/global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt", "optim 5 r0", 1)
	write(t, d1, "ds/global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt", "optim 5 r1", 1)
	write(t, d0, "ds/latest", "global_step5", 2)
	u0 := &Uploader{Target: target(s, 0, d0), NoInotify: true}
	u1 := &Uploader{Target: target(s, 1, d1), NoInotify: true}
	for _, u := range []*Uploader{u0, u1} {
		if err := u.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The next save: every shard written, the pods die before `latest` moves on.
	write(t, d0, "ds/global_step10/mp_rank_00_model_states.pt", "model 10", 3)
	write(t, d0, "ds/global_step10/zero_pp_rank_0_mp_rank_00_optim_states.pt", "optim 10 r0", 3)
	write(t, d1, "ds/global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt", "optim 10 r1", 3)
	for _, u := range []*Uploader{u0, u1} {
		if err := u.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := sealedOf(t, s, 0); !slices.Equal(got, []string{"ds/global_step5"}) {
		t.Errorf("rank 0 sealed %q", got)
	}
	for rank := range 2 {
		fresh := t.TempDir()
		r, err := Restore(ctx, target(s, rank, fresh), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Resume != filepath.Join(fresh, "ds") || r.ResumeUnit.Path != "ds/global_step5" {
			t.Errorf("rank %d resumes from %q (%s)", rank, r.Resume, r.ResumeUnit.Path)
		}
		for _, f := range []string{"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} {
			if !exists(fresh, "ds/global_step5/"+f) {
				t.Errorf("rank %d: global_step5/%s not restored", rank, f)
			}
		}
		if exists(fresh, "ds/global_step10") {
			t.Errorf("rank %d: the tag `latest` never named was restored", rank)
		}
		if b, err := os.ReadFile(filepath.Join(fresh, "ds/latest")); err != nil || string(b) != "global_step5" {
			t.Errorf("rank %d: latest = %q, %v", rank, b, err)
		}
		// Nothing the restore placed (the marker it wrote included) goes back to S3 from this rank.
		var puts countingPuts
		u := &Uploader{Target: target(s, rank, fresh), NoInotify: true, Own: r.Own, Placed: r.Placed, Protect: r.ResumeUnit.Path}
		u.Client = countPuts(t, s, &puts.n)
		if err := u.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := puts.n.Load(); n != 0 {
			t.Errorf("rank %d sent %d objects back after its restore", rank, n)
		}
	}
}

// Megatron with --checkpoint-keep 2 keeps two iterations, every file of each.
func TestMegatronRetentionKeepsIterationsWhole(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	up := &Uploader{Target: target(s, 0, dir), NoInotify: true, Keep: 2}
	for i, it := range []string{"0000002", "0000004", "0000006"} {
		write(t, dir, "iter_"+it+"/mp_rank_00/model_optim_rng.pt", "m"+it, 2*i+1)
		write(t, dir, "iter_"+it+"/mp_rank_00/distrib_optim.pt", "o"+it, 2*i+1)
		write(t, dir, "latest_checkpointed_iteration.txt", strings.TrimLeft(it, "0"), 2*i+2)
		if err := up.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"iter_0000004/mp_rank_00/distrib_optim.pt", "iter_0000004/mp_rank_00/model_optim_rng.pt",
		"iter_0000006/mp_rank_00/distrib_optim.pt", "iter_0000006/mp_rank_00/model_optim_rng.pt",
		"latest_checkpointed_iteration.txt",
	}
	if got := manifest(t, s, 0); !slices.Equal(got, want) {
		t.Errorf("manifest %q; want %q", got, want)
	}
	if got := sealedOf(t, s, 0); !slices.Equal(got, []string{"iter_0000004", "iter_0000006"}) {
		t.Errorf("sealed %q", got)
	}
	files := s3layout.CheckpointFilesPrefix(prefix, 0)
	if keys := s.Keys(files + "iter_0000002/"); len(keys) != 0 {
		t.Errorf("the oldest iteration is still in S3: %q", keys)
	}
}

// A directory a user's pattern names is sealed once renamed into place, or once it stopped
// changing for Settle; one still changing is not.
func TestUserDirectoryUnits(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	tg := target(s, 0, dir)
	tg.Patterns = []string{"ckpt_*/"}
	up := &Uploader{Target: tg, NoInotify: true, Settle: time.Hour}
	write(t, dir, "ckpt_1/weights.bin", "w1", 1)
	write(t, dir, "ckpt_1/state.json", "s1", 1)
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sealedOf(t, s, 0); len(got) != 0 {
		t.Fatalf("sealed %q before it settled", got)
	}
	up.notified("ckpt_1/") // renamed into place
	if err := up.round(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := sealedOf(t, s, 0); !slices.Equal(got, []string{"ckpt_1"}) {
		t.Errorf("sealed %q after the rename", got)
	}
	up.Settle = time.Nanosecond
	write(t, dir, "ckpt_2/weights.bin", "w2", 2)
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := up.round(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := sealedOf(t, s, 0); !slices.Equal(got, []string{"ckpt_1", "ckpt_2"}) {
		t.Errorf("sealed %q once settled", got)
	}
	r, err := Restore(ctx, target(s, 0, t.TempDir()), nil)
	if err != nil || r.ResumeUnit.Path != "" {
		// The restore reads the default patterns here: no unit of them.
		t.Errorf("default patterns: %+v, %v", r.ResumeUnit, err)
	}
	fresh := t.TempDir()
	tg.Dir = fresh
	if r, err = Restore(ctx, tg, nil); err != nil || r.Resume != filepath.Join(fresh, "ckpt_2") {
		t.Errorf("resume %q, %v", r.Resume, err)
	}
}

// After the first --checkpoint-keep files, none of which a pattern names, the log says so once.
func TestNoCheckpointIsSaidOnce(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	var log testbuf.Buffer
	up := &Uploader{Target: target(s, 0, dir), NoInotify: true, Keep: 2, Log: &log}
	write(t, dir, "weights.bin", "w", 1)
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "none of") {
		t.Fatalf("said after one file:\n%s", log.String())
	}
	write(t, dir, "opt.bin", "o", 2)
	write(t, dir, "more.bin", "m", 3)
	for range 2 {
		if err := up.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(log.String(), "none of the"); n != 1 || !strings.Contains(log.String(), "(more.bin, opt.bin, weights.bin)") {
		t.Errorf("said %d times:\n%s", n, log.String())
	}
}

// countingPuts counts a client's PUT requests (countPuts).
type countingPuts struct{ n atomic.Int32 }

// The unit an attempt resumed from stays while the command runs, and goes at the last round
// once newer units make it one too many.
func TestResumedUnitKeptWhileTheCommandRuns(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	up := &Uploader{Target: target(s, 0, dir), NoInotify: true, Keep: 1, Protect: "e1.pth", Settle: time.Nanosecond}
	for i, n := range []string{"e1.pth", "e2.pth", "e3.pth"} {
		write(t, dir, n, n, i+1)
	}
	if err := up.round(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := up.round(ctx, false); err != nil { // settled now
		t.Fatal(err)
	}
	if got := manifest(t, s, 0); !slices.Equal(got, []string{"e1.pth", "e3.pth"}) {
		t.Errorf("while the command runs: %q; want the resumed e1.pth and the newest", got)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := manifest(t, s, 0); !slices.Equal(got, []string{"e3.pth"}) {
		t.Errorf("after the last round: %q; want e3.pth alone", got)
	}
}
