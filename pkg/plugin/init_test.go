package plugin_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/kubectl/pkg/util/i18n"
)

// TestTranslationsNotLoaded checks that util/noi18n initialises before kubectl's get printing:
// were the catalogue loaded at start-up (a cost to every command's start), a German locale
// would translate this string, which kubectl's catalogue does.
func TestTranslationsNotLoaded(t *testing.T) {
	if os.Getenv("NOI18N_CHILD") == "1" {
		fmt.Print(i18n.T("Display one or many resources"))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTranslationsNotLoaded$")
	cmd.Env = append(os.Environ(), "NOI18N_CHILD=1", "LC_ALL=de_DE.UTF-8", "LANG=de_DE.UTF-8")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), "Display one or many resources") {
		t.Errorf("kubectl's translations were loaded at start-up: got %q", out)
	}
}
