package localcluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

// The torch image, local/torch:1: Debian's python3-torch (CPU) and everything it needs at run
// time, copied from the host as it lies (hostImage), so the real node runs real torchrun
// without a registry. It exists only where python3-torch is installed (`.ci/run` installs it);
// elsewhere the launcher says why and the torch test skips, or fails under CI. torch has
// thousands of modules, which is why its image keeps the host's mtimes: they would all be
// recompiled at every start otherwise.

// Image role and reference.
const (
	ImageTorch    = "torch"
	TorchImageRef = "docker.io/local/torch:1"
)

// torchPackages are the entries of dist-packages that `import torch`, torchrun and a gloo
// process group import (measured with sys.modules): torch and its runtime Python dependencies.
var torchPackages = []string{"torch", "numpy", "typing_extensions.py", "six.py", "astunparse"}

// torchrunScript is the image's torchrun. Debian's /usr/bin/torchrun finds its entry point
// through the package metadata (torch-*.egg-info), which the image leaves out; this calls the
// same function.
const torchrunScript = `#!/usr/bin/python3
# torchrun: torch.distributed.run, what Debian's /usr/bin/torchrun calls through its entry point.
import sys
from torch.distributed.run import main
sys.exit(main())
`

// TorchUnavailable says why the torch image cannot be built on the host whose root is root
// ("/" outside tests), or "" when it can.
func TorchUnavailable(root string) string {
	for _, p := range []string{hostPython, filepath.Join(distPackages, "torch", "__init__.py")} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return fmt.Sprintf("python3-torch is not installed on this host (no %s): `apt-get install --no-install-recommends python3-torch` (as .ci/run does)", p)
		}
	}
	return ""
}

// torchImageEntries collects the torch image's files from this host.
func torchImageEntries() ([]release.LayerEntry, error) {
	h, err := hostImage{
		programs: []string{"/bin/sh", "/bin/bash"},
		extra:    []release.LayerEntry{{Path: "usr/bin/torchrun", Mode: 0o755, Data: []byte(torchrunScript)}},
	}.withPython(torchPackages...)
	if err != nil {
		return nil, err
	}
	return h.entries()
}
