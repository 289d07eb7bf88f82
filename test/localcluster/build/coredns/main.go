// Command coredns is CoreDNS v1.15.0 with only the plugins the real node's cluster DNS needs:
// the kubernetes plugin answers Service and pod names from the local cluster's API, hosts
// names the host's bridge address, bind keeps it off every address but the bridge's, health
// and ready let the launcher wait for it. Linking only these keeps the build at a few minutes
// instead of the full distribution's.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The plugins' order in a server block comes from this list, not from the imports above.
var _ = dnsserver.Directives

func main() { coremain.Run() }
