// CoreDNS with only the plugins the real node's Corefile uses (tools/k8s/node.py corefile()): the full build
// compiles every cloud provider's SDK. tools/node/build.sh builds it in this module, after the kube commands: one
// version of the dependencies they share, so their compiled packages are reused (CoreDNS v1.14.6: its
// requirements raise none of the kube commands' dependencies).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// In the order of CoreDNS's plugin.cfg: the order in which a query passes the plugins.
var directives = []string{"bind", "ready", "errors", "cache", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
