package submit

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobcreate"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/workdir"
)

// packedWorkdir is --workdir once packed: what submit prints and, for S3, uploads.
type packedWorkdir struct {
	dir     string
	archive *workdir.Archive
	summary workdir.Summary
}

// shellHasS3 reports whether this shell holds the credentials S3 staging needs: --workdir then
// goes through S3 rather than a ConfigMap (anyone who may read ConfigMaps could read it there).
func shellHasS3(getenv func(string) string) bool {
	creds := map[string]string{}
	for _, k := range s3layout.CredentialKeys {
		creds[k] = getenv(k)
	}
	return len(jobspec.MissingCredentials(creds)) == 0
}

// workdirViaS3 reports whether --workdir travels through S3: with S3 staging or an S3 Secret
// named, or the S3 variables set in this shell.
func (o *Options) workdirViaS3() bool {
	return o.Workdir != "" && (o.S3Secret != "" || shellHasS3(o.getenv))
}

// completeWorkdir packs --workdir: the size bound is checked on the listing, before a byte is
// read; the archive is kept in memory, so a failed submit leaves no file behind. Packing
// progress goes to stderr when it is a terminal.
func (o *Options) completeWorkdir(cmd *cobra.Command) error {
	if o.Workdir == "" {
		for _, flag := range []string{"workdir-mount", "workdir-max-size"} {
			if cmd.Flags().Changed(flag) {
				return fmt.Errorf("--%s only applies with --workdir", flag)
			}
		}
		return nil
	}
	limit, err := resource.ParseQuantity(o.WorkdirMaxSize)
	if err != nil || limit.Sign() <= 0 {
		return fmt.Errorf("invalid --workdir-max-size %q: expected a positive quantity such as 256Mi or 2Gi", o.WorkdirMaxSize)
	}
	tree, err := workdir.Scan(o.Workdir, limit.Value())
	if err != nil {
		return err
	}
	archive := &workdir.Archive{}
	sum, err := tree.Pack(archive, o.progress("packing "+o.Workdir, tree.Size))
	if err != nil {
		return err
	}
	o.workdir = &packedWorkdir{dir: o.Workdir, archive: archive, summary: sum}
	w := &jobspec.Workdir{MountPath: o.WorkdirMount, SHA256: sum.SHA256}
	if st := o.spec.Staging; st != nil {
		w.StagerImage = st.StagerImage
	} else {
		// The ConfigMap's one slice (the spec refuses it when over a ConfigMap's limit).
		w.Archive = archive.Bytes()
		if w.StagerImage, err = o.stagerImage(cmd); err != nil {
			return err
		}
	}
	o.spec.Workdir = w
	return nil
}

// progress returns a callback that redraws one status line on stderr when it is a terminal
// (packing, and the S3 upload), and nil otherwise: logs and pipes get only the summary line.
func (o *Options) progress(what string, total int64) func(int64) {
	if !cmdutil.IsTerminal(o.ErrOut) || total == 0 {
		return nil
	}
	return func(done int64) {
		fmt.Fprintf(o.ErrOut, "\r%s: %s of %s", what, s3.HumanBytes(done), s3.HumanBytes(total))
		if done >= total {
			fmt.Fprintln(o.ErrOut)
		}
	}
}

// reportWorkdir says on stderr what was packed and where it goes.
func (o *Options) reportWorkdir(w io.Writer) {
	if o.workdir == nil {
		return
	}
	where := "ConfigMap " + jobspec.WorkdirConfigMapName(o.spec.Name)
	if o.spec.Workdir.InS3() {
		where = "s3://BUCKET/results/" + o.spec.Name + "/JOB_UID/.kubectl-tao/" + s3layout.WorkdirArchive
	}
	verb := "ships"
	if o.dryRun != cmdutil.DryRunNone {
		verb = "would ship"
	}
	fmt.Fprintf(w, "workdir %s: %s; %s in %s, unpacked at %s\n", o.workdir.dir, o.workdir.summary, verb, where, o.spec.Workdir.MountPath)
}

// workdirUpload is jobcreate.Create's step for an S3 --workdir: the archive goes below the run's results
// prefix, which needs the Job's UID, while the Job is still suspended.
func (o *Options) workdirUpload(ctx context.Context, client kubernetes.Interface) (jobcreate.BeforeStart, error) {
	if o.spec.Workdir == nil || !o.spec.Workdir.InS3() || o.dryRun != cmdutil.DryRunNone {
		return nil, nil
	}
	cfg, err := o.s3Config(ctx, client)
	if err != nil {
		return nil, err
	}
	s3c, err := s3.NewClient(cfg, nil)
	if err != nil {
		return nil, err
	}
	archive := o.workdir.archive
	progress := o.progress("uploading "+o.Workdir, archive.Size())
	return func(ctx context.Context, job *batchv1.Job) (func(context.Context) error, error) {
		return workdir.Upload(ctx, s3c, cfg.Bucket, job.Name, string(job.UID), archive, progress)
	}, nil
}

// s3Config is what submit itself uploads with: the shell's credentials, or the --s3-secret's.
func (o *Options) s3Config(ctx context.Context, client kubernetes.Interface) (s3.Config, error) {
	st := o.spec.Staging
	if st.ExistingSecret == "" {
		return s3.ConfigFromEnv(func(k string) string { return st.Credentials[k] }), nil
	}
	sec, err := client.CoreV1().Secrets(o.spec.Namespace).Get(ctx, st.ExistingSecret, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return s3.Config{}, fmt.Errorf("--workdir goes through S3 and submit uploads it with the credentials of --s3-secret %s, "+
				"which you may not read: export ACCESS_KEY, SECRET_KEY and S3_BUCKET_NAME instead", st.ExistingSecret)
		}
		return s3.Config{}, fmt.Errorf("reading --s3-secret secret/%s: %w", st.ExistingSecret, err)
	}
	return s3.ConfigFromSecretData(sec.Data), nil
}
