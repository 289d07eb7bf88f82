package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The component commands check their argument before touching any state: a typo must not
// stop or start anything.
func TestComponentCommandArguments(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restart", "--state-dir", dir}, "no component given"},
		{[]string{"stop", "apiserver", "--state-dir", dir}, `unknown component "apiserver"`},
		{[]string{"start", "--state-dir", dir, "etcd", "kwok"}, "unexpected arguments [kwok]"},
		{[]string{"restart", "etcd", "--state-dir", dir, "kwok"}, "unexpected arguments [kwok]"},
		// A valid component gets as far as the missing cluster.
		{[]string{"restart", "kube-apiserver", "--state-dir", dir}, "read cluster state"},
		{[]string{"stop", "--state-dir", dir, "kwok"}, "read cluster state"},
		// relabel checks the product before it looks for the cluster.
		{[]string{"relabel", "--product", "v100", "--product-nodes", "1", "--state-dir", dir}, `unknown GPU product "v100"`},
		{[]string{"relabel", "--product", "a100", "--product-nodes", "1", "--state-dir", dir}, "read cluster state"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
