#!/usr/bin/env bash
# Builds what a real node runs beside the kubelet (tools/k8s): containerd 2.x with its runc shim and ctr, CoreDNS,
# and the pause program of the sandbox image, into a cache outside the checkout keyed like tools/k8s/build.sh (each
# module's go.mod and go.sum, versions, the Go version, the flags). Prints the bin directory. A second run builds
# nothing.   build.sh --cached   print the directory if complete, else exit 1 (never builds)
# containerd and CoreDNS are separate modules: one module would force one version of their shared dependencies.
# CoreDNS is built from coredns/main.go with only the plugins the node's Corefile uses: the full build compiles
# the cloud providers' SDKs (route53, azure, clouddns) it would never run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
. ../cached_build.sh

flags="CGO_ENABLED=0 -trimpath -ldflags=-s -w"
binaries=(containerd containerd-shim-runc-v2 ctr coredns pause)
key=$( { cat containerd/go.mod containerd/go.sum coredns/go.mod coredns/go.sum coredns/main.go pause.c; go version; gcc --version | head -1
	echo "$flags|${binaries[*]}"; } | sha256sum | cut -c1-16)
root=${SOPERATOR_CACHE:-$HOME/.cache/soperator}/node/$key

complete() { for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || return 1; done; }
cache_open "$@"
export CGO_ENABLED=0  # containerd: no cgo-only plugins (btrfs); a static binary
jobs=${K8S_BUILD_JOBS:-2}
version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }
build() {  # module dir, output name, package, extra ldflags
	echo "building $2 ($3)" >&2
	(cd "$1" && go build -p "$jobs" -trimpath -ldflags "-s -w $4" -o "$staging/$2" "$3") >&2
}
cv=$(version containerd github.com/containerd/containerd/v2)
cvf="-X github.com/containerd/containerd/v2/version.Version=$cv"
# The three commands in one `go build` (same flags): the package graph is loaded once and the links overlap.
containerd_cmds=(containerd containerd-shim-runc-v2 ctr)
echo "building ${containerd_cmds[*]}" >&2
(cd containerd && go build -p "$jobs" -trimpath -ldflags "-s -w $cvf" -o "$staging/" \
	"${containerd_cmds[@]/#/github.com/containerd/containerd/v2/cmd/}") >&2
build coredns coredns . ""  # coredns/main.go: the Corefile's plugins only
# The sandbox image's program: waits for a signal, reaps children. Static, so the image holds one file.
gcc -Os -static -o "$staging/pause" pause.c >&2
strip "$staging/pause"

cache_close "${binaries[*]}"
