package submit

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// validateResumeFrom checks --resume-from and --resume-from-uid without contacting anything.
func (o *Options) validateResumeFrom() error {
	switch {
	case o.ResumeFrom == "" && o.ResumeFromUID != "":
		return exitcode.Usagef("--resume-from-uid only applies with --resume-from")
	case o.ResumeFrom == "":
		return nil
	case o.spec.Staging == nil || o.spec.Staging.Checkpoints == nil:
		return exitcode.Usagef("--resume-from needs --checkpoint-dir: the checkpoints are restored there")
	}
	if msgs := validation.IsDNS1123Subdomain(o.ResumeFrom); len(msgs) > 0 {
		return exitcode.Usagef("invalid --resume-from %q: not a job name: %s", o.ResumeFrom, strings.Join(msgs, "; "))
	}
	if err := jobresults.ValidateUID(o.ResumeFrom, o.ResumeFromUID); err != nil {
		return exitcode.Usagef("--resume-from-uid: %s", strings.TrimPrefix(err.Error(), "--uid: "))
	}
	if o.dryRun == cmdutil.DryRunClient {
		if o.ResumeFromUID == "" {
			return exitcode.Usagef("--dry-run=client does not look the run of --resume-from up in S3: give --resume-from-uid")
		}
		o.spec.Staging.Checkpoints.FromJob, o.spec.Staging.Checkpoints.FromUID = o.ResumeFrom, o.ResumeFromUID
	}
	return nil
}

// resolveResumeFrom finds the run of --resume-from as `results` finds runs (the Job's own while
// it exists, else the only run in S3, or --resume-from-uid), with the S3 credentials the new
// job uses, and checks that it kept checkpoints: a job that would start from step 0 after all
// is refused before it is created.
func (o *Options) resolveResumeFrom(ctx context.Context, client kubernetes.Interface) error {
	if o.ResumeFrom == "" {
		return nil
	}
	job, err := client.BatchV1().Jobs(o.spec.Namespace).Get(ctx, o.ResumeFrom, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		job = nil
	case err != nil:
		return fmt.Errorf("--resume-from: %w", err)
	}
	ref, err := jobresults.FindRun(ctx, client, jobresults.Lookup{
		Namespace: o.spec.Namespace, Name: o.ResumeFrom, Job: job, UID: o.ResumeFromUID,
		Source: jobresults.Source{Getenv: o.getenv, Secret: o.S3Secret},
	})
	if err != nil {
		return fmt.Errorf("--resume-from: %w", err)
	}
	prefix := s3layout.CheckpointsPrefix(ref.Prefix)
	manifests, err := jobresults.RunManifests(ctx, ref.Client, ref.Bucket, ref.Prefix)
	if err != nil {
		return fmt.Errorf("--resume-from: %w", err)
	}
	if len(manifests) == 0 {
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("--resume-from: run %s of job %s kept no checkpoints (nothing under %s; was it submitted with --checkpoint-dir?)",
			ref.UID, o.ResumeFrom, ref.URL(prefix)))
	}
	patterns := o.spec.Staging.Checkpoints.Patterns
	if patterns == nil {
		patterns = s3layout.DefaultCheckpointPatterns
	}
	units := s3layout.RunUnits(manifests, patterns)
	if _, ok := s3layout.ResumeUnit(units); !ok {
		// A run that kept files but no complete unit would start the new run from step 0.
		seen := "no file of it is a checkpoint by --checkpoint-pattern " + strings.Join(patterns, " ")
		if len(units) > 0 {
			seen = fmt.Sprintf("none of its %s is complete (the newest, %s, was cut short)", plural.N(len(units), "checkpoint"), units[0].Path)
		}
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("--resume-from: run %s of job %s has no checkpoint to resume from under %s: %s",
			ref.UID, o.ResumeFrom, ref.URL(prefix), seen))
	}
	o.spec.Staging.Checkpoints.FromJob, o.spec.Staging.Checkpoints.FromUID = o.ResumeFrom, ref.UID
	return nil
}
