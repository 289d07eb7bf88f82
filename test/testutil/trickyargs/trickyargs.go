// Package trickyargs holds the argv entries that test kubectl-tao's command contract: arguments
// a shell would mangle if the wrapper re-parsed or re-quoted them, and that the kubelet would
// rewrite ($(VAR), $$) unless they are escaped. The wrapper's unit test (in job/jobspec) runs
// them through an emulation of the kubelet, the real-node e2e test through a real one: one
// list, so that both prove the same promise.
package trickyargs

// Args must reach the user's program byte for byte.
var Args = []string{
	"a b", "it's", `"quoted"`, "$HOME", "$(echo pwned)", "$$", "`id`", ";rm -rf /", "a\nb",
	"üñí©ødé ✓", "", "--", "*", `\`, "-c", "${JOB_COMPLETION_INDEX}", "%s", "\t",
}
