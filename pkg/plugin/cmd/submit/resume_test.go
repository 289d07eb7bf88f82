package submit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// resumeArgs submits a job that keeps checkpoints, with extra flags.
func resumeArgs(extra ...string) []string {
	return append(append([]string{"fixed", "--image", "img", "--gpus", "0", "--stager-image", "s", "--checkpoint-dir", "/ckpt"}, extra...), "--", "python", "train.py")
}

// --resume-from finds the earlier run in S3 once its Job is gone (the only run of that name)
// and hands it to the pods; a run that kept no checkpoints, or several runs and no UID, is
// refused before anything is created.
func TestSubmitResumeFrom(t *testing.T) {
	srv := s3fake.Start(t, s3fake.Options{})
	srv.Put(s3layout.CheckpointManifestKey("results/buggy/uid-1/", 0), manifestWith("results/buggy/uid-1/", "checkpoint-4/model.safetensors", "checkpoint-4/trainer_state.json", "checkpoint-5/model.safetensors"))
	// A run that kept files, but no complete checkpoint: a new run would start at step 0.
	srv.Put(s3layout.CheckpointManifestKey("results/cut/uid-4/", 0), manifestWith("results/cut/uid-4/", "checkpoint-5/model.safetensors", "config.json"))
	srv.Put(s3layout.CheckpointManifestKey("results/noname/uid-5/", 0), manifestWith("results/noname/uid-5/", "weights.bin"))
	srv.Put("results/plain/uid-2/results/out.txt", "x")
	env := srv.Env()

	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, env, resumeArgs("--resume-from", "buggy")...)
	if r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	job, err := c.BatchV1().Jobs("default").Get(context.Background(), "fixed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var from string
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == s3layout.EnvStageCheckpointFrom {
			from = e.Value
		}
	}
	if from != "buggy/uid-1" {
		t.Errorf("$%s = %q, want buggy/uid-1", s3layout.EnvStageCheckpointFrom, from)
	}

	srv.Put(s3layout.CheckpointManifestKey("results/buggy/uid-3/", 0), manifestWith("results/buggy/uid-3/", "step-1.pt"))
	for _, tc := range []struct {
		args []string
		code exitcode.Code
		want string
	}{
		{resumeArgs("--resume-from", "plain"), exitcode.NotFound, "run uid-2 of job plain kept no checkpoints"},
		{resumeArgs("--resume-from", "buggy"), exitcode.Usage, "--uid"},
		{resumeArgs("--resume-from", "nothing"), exitcode.NotFound, "nothing"},
		{resumeArgs("--resume-from", "cut"), exitcode.NotFound, "has no checkpoint to resume from under s3://bucket/results/cut/uid-4/.kubectl-tao/checkpoints/: none of its 1 checkpoint is complete (the newest, checkpoint-5, was cut short)"},
		{resumeArgs("--resume-from", "noname"), exitcode.NotFound, "no file of it is a checkpoint by --checkpoint-pattern"},
	} {
		c := newClient()
		r := runEnv(t, cmdtest.Cmd{Client: c}, env, tc.args...)
		if r.Code != int(tc.code) || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: got %+v, want exit %d and %q", tc.args, r, tc.code, tc.want)
		}
		for _, a := range c.Actions() {
			if a.GetVerb() == "create" {
				t.Errorf("%v: created %s", tc.args, a.GetResource().Resource)
			}
		}
	}
	c = newClient()
	if r := runEnv(t, cmdtest.Cmd{Client: c}, env, resumeArgs("--resume-from", "buggy", "--resume-from-uid", "uid-3")...); r.Code != 0 {
		t.Errorf("with --resume-from-uid: %+v", r)
	}
}

// manifestWith is rank 0's manifest of the run under prefix holding files, written a minute apart.
func manifestWith(prefix string, files ...string) string {
	m := s3layout.Manifest{Rank: 0}
	for i, f := range files {
		mf, err := s3layout.NewManifestFile(prefix, 0, f, 1, time.Date(2026, 3, 1, 10, i, 0, 0, time.UTC))
		if err != nil {
			panic(err)
		}
		m.Files = append(m.Files, mf)
	}
	data, err := s3layout.EncodeManifest(m)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func TestSubmitResumeFromUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"j", "--image", "img", "--resume-from", "old", "--", "true"}, "--resume-from needs --checkpoint-dir"},
		{resumeArgs("--resume-from-uid", "uid-1"), "--resume-from-uid only applies with --resume-from"},
		{resumeArgs("--resume-from", "Bad_Name"), `invalid --resume-from "Bad_Name": not a job name`},
		{resumeArgs("--resume-from", "old", "--resume-from-uid", "a/b"), "--resume-from-uid: "},
		{resumeArgs("--resume-from", "old", "--dry-run=client"), "give --resume-from-uid"},
	} {
		c := newClient()
		r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, tc.args...)
		if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: got %+v, want exit 2 and %q", tc.args, r, tc.want)
		}
		if len(c.Actions()) != 0 {
			t.Errorf("%v: actions %v, want none", tc.args, c.Actions())
		}
	}
	// A client dry run with the UID shows the run without looking it up.
	r := runEnv(t, cmdtest.Cmd{Client: newClient()}, shellCreds, resumeArgs("--resume-from", "old", "--resume-from-uid", "uid-9", "--dry-run=client", "-o", "yaml")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "value: old/uid-9") {
		t.Errorf("dry run: %+v", r)
	}
}
