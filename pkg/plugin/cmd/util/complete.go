package util

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobref"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// completionPageSize is the page size of completion lists: big enough that one request answers
// almost every namespace, small enough that a huge one never arrives as a single response.
const completionPageSize = 500

// jobRefPrefixes are the resource prefixes jobref.Parse accepts; a word typed with one of them
// is completed with the same prefix, as kubectl completes "job/<TAB>".
var jobRefPrefixes = []string{"job/", "jobs/", "job.batch/", "jobs.batch/"}

// CompleteJobNames completes the JOB argument of commands that take one JOB with the names of
// the Jobs kubectl-tao created in the namespace (label app.kubernetes.io/managed-by=kubectl-tao).
// Use it as a command's ValidArgsFunction. Errors (no cluster, no permission) complete nothing
// rather than print anything: a shell completion has nowhere to show them.
func CompleteJobNames(f Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeJobs(cmd.Context(), f, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// CompleteJobNamesMulti is CompleteJobNames for commands that take several JOBs: names already
// on the command line are not offered again.
func CompleteJobNamesMulti(f Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		taken := map[string]bool{}
		for _, a := range args {
			if ref, err := jobref.Parse(a); err == nil {
				taken[ref] = true
			}
		}
		var out []string
		for _, c := range completeJobs(cmd.Context(), f, toComplete) {
			if ref, err := jobref.Parse(c); err == nil && !taken[ref] {
				out = append(out, c)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func completeJobs(ctx context.Context, f Factory, toComplete string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	prefix, word := "", toComplete
	for _, p := range jobRefPrefixes {
		if strings.HasPrefix(toComplete, p) {
			prefix, word = p, strings.TrimPrefix(toComplete, p)
			break
		}
	}
	ns, err := f.Namespace()
	if err != nil {
		cobra.CompDebugln("namespace: "+err.Error(), false)
		return nil
	}
	client, err := f.KubernetesClient()
	if err != nil {
		cobra.CompDebugln("client: "+err.Error(), false)
		return nil
	}
	var names []string
	opts := metav1.ListOptions{
		LabelSelector: jobspec.ManagedByLabel + "=" + jobspec.ManagedByValue,
		Limit:         completionPageSize,
	}
	_, err = pages.Each(ctx, opts, client.BatchV1().Jobs(ns).List, func(list *batchv1.JobList) {
		for _, j := range list.Items {
			if strings.HasPrefix(j.Name, word) {
				names = append(names, prefix+j.Name)
			}
		}
	})
	if err != nil {
		cobra.CompDebugln("listing jobs: "+err.Error(), false)
		return nil
	}
	return names
}
