// Package completion implements `kubectl tao completion` and the completion of kubectl's
// connection flags (--namespace, --context, --cluster, --user).
//
// Two names reach the plugin: `kubectl-tao` (the scripts cobra generates) and `kubectl tao`,
// which kubectl 1.26+ completes by running a `kubectl_complete-tao` executable found on PATH.
// That script (embedded below and shipped in every release archive) hands the words to
// `kubectl-tao __complete`, so both names get the same answers.
package completion

import (
	_ "embed"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/kubectl/pkg/util/templates"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// KubectlScript is the kubectl_complete-tao script for Unix shells.
//
//go:embed kubectl_complete-tao
var KubectlScript string

// KubectlScriptName is the file name kubectl looks for on PATH.
const KubectlScriptName = "kubectl_complete-tao"

// InstallLine puts KubectlScript into krew's bin directory, which krew users already have on
// PATH. krew links only the plugin binary there, so the script needs this one extra step. The
// script it writes names no version, so it survives `kubectl krew upgrade`.
const InstallLine = `printf '#!/usr/bin/env sh\nexec kubectl-tao __complete "$@"\n' > "${KREW_ROOT:-$HOME/.krew}/bin/kubectl_complete-tao" && chmod +x "${KREW_ROOT:-$HOME/.krew}/bin/kubectl_complete-tao"`

var long = templates.LongDesc(`
	Print a shell completion script for kubectl-tao, or (with "kubectl") the line that makes
	TAB complete "kubectl tao" commands through kubectl.

	Job names (of the jobs kubectl tao submitted), namespaces and kubeconfig contexts, clusters
	and users are completed from the cluster and the kubeconfig.

	bash needs the bash-completion package; zsh needs compinit. "kubectl tao" is
	completed by kubectl itself (1.26 or newer) once an executable named kubectl_complete-tao is
	on PATH: the release archives contain it, and krew users create it with the line that
	"kubectl tao completion kubectl" prints.

	Guide: https://github.com/kubectl-tao/kubectl-tao#shell-completion`)

var example = templates.Examples(`
	# Complete "kubectl tao <TAB>" through kubectl (krew installs): run the printed line once
	eval "$(kubectl tao completion kubectl)"

	# Complete the kubectl-tao command in the current bash shell, or in every new one
	source <(kubectl tao completion bash)
	kubectl tao completion bash > ~/.local/share/bash-completion/completions/kubectl-tao

	# zsh, fish, PowerShell
	kubectl tao completion zsh > "${fpath[1]}/_kubectl-tao"
	kubectl tao completion fish > ~/.config/fish/completions/kubectl-tao.fish
	kubectl tao completion powershell | Out-String | Invoke-Expression`)

var shells = []string{"bash", "zsh", "fish", "powershell", "kubectl"}

// NewCmd builds `kubectl tao completion SHELL`.
func NewCmd(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:                   "completion bash|zsh|fish|powershell|kubectl",
		DisableFlagsInUseLine: true,
		Short:                 "Print a shell completion script, or how to complete kubectl tao through kubectl",
		Long:                  long,
		Example:               example,
		ValidArgs:             shells,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return exitcode.Usagef("expected one shell (%s), got %d arguments", strings.Join(shells, ", "), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Root(), streams, args[0])
		},
	}
}

func run(root *cobra.Command, streams genericiooptions.IOStreams, shell string) error {
	switch shell {
	case "bash":
		return root.GenBashCompletionV2(streams.Out, true)
	case "zsh":
		return root.GenZshCompletion(streams.Out)
	case "fish":
		return root.GenFishCompletion(streams.Out, true)
	case "powershell":
		return root.GenPowerShellCompletionWithDesc(streams.Out)
	case "kubectl":
		_, err := fmt.Fprintln(streams.Out, InstallLine)
		return err
	}
	return exitcode.Usagef("unsupported shell %q: must be one of %s", shell, strings.Join(shells, ", "))
}

// RegisterFlags completes kubectl's connection flags on root (persistent, so every command
// inherits them): --namespace from the cluster, --context, --cluster and --user from the
// kubeconfig. Call it after flags were added to root's persistent flags.
func RegisterFlags(root *cobra.Command, flags *genericclioptions.ConfigFlags, f cmdutil.Factory) {
	register := func(name string, fn cobra.CompletionFunc) {
		if root.PersistentFlags().Lookup(name) != nil {
			_ = root.RegisterFlagCompletionFunc(name, fn)
		}
	}
	register("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return namespaces(cmd, f, toComplete), cobra.ShellCompDirectiveNoFileComp
	})
	register("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return fromKubeconfig(flags, func(c clientcmdapi.Config) []string { return keys(c.Contexts) }), cobra.ShellCompDirectiveNoFileComp
	})
	register("cluster", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return fromKubeconfig(flags, func(c clientcmdapi.Config) []string { return keys(c.Clusters) }), cobra.ShellCompDirectiveNoFileComp
	})
	register("user", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return fromKubeconfig(flags, func(c clientcmdapi.Config) []string { return keys(c.AuthInfos) }), cobra.ShellCompDirectiveNoFileComp
	})
}

// namespaces lists the cluster's namespaces, paged.
func namespaces(cmd *cobra.Command, f cmdutil.Factory, toComplete string) []string {
	client, err := f.KubernetesClient()
	if err != nil {
		cobra.CompDebugln("client: "+err.Error(), false)
		return nil
	}
	var names []string
	_, err = pages.Each(cmd.Context(), metav1.ListOptions{Limit: 500}, client.CoreV1().Namespaces().List, func(list *corev1.NamespaceList) {
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, toComplete) {
				names = append(names, ns.Name)
			}
		}
	})
	if err != nil {
		cobra.CompDebugln("listing namespaces: "+err.Error(), false)
		return nil
	}
	return names
}

// fromKubeconfig answers from the merged kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config).
func fromKubeconfig(flags *genericclioptions.ConfigFlags, pick func(clientcmdapi.Config) []string) []string {
	raw, err := flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		cobra.CompDebugln("kubeconfig: "+err.Error(), false)
		return nil
	}
	return pick(raw)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
