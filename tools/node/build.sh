#!/usr/bin/env bash
# Puts what a real node runs beside the kubelet (tools/k8s) into a cache outside the checkout keyed like
# tools/k8s/build.sh (versions, go.mod and go.sum, the Go version, the flags): containerd with its runc shim and ctr,
# CoreDNS, and the pause program of the sandbox image. Prints the bin directory. A second run does nothing.
#   build.sh --cached   print the directory if complete, else exit 1 (never builds)
# containerd is Debian's package (versions.env), downloaded with apt from that suite into a private apt folder (the
# host's sources are not touched; apt checks the suite's signed Release and the package's hash): compiling it took
# about 5 CPU-minutes of a cold CI run's critical path. CoreDNS is compiled from ../k8s/coredns/main.go in the k8s
# module, after `make k8s-control-plane`: most of its packages are the kube commands' and come from Go's build cache.
# Its main.go links only the plugins the node's Corefile uses: the full build compiles the cloud providers' SDKs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
. ../cached_build.sh
. ./versions.env

gcflags="all=-dwarf=false"   # as tools/k8s/build.sh compiles: CoreDNS's packages then come from its build cache
flags="CGO_ENABLED=0 -trimpath -gcflags=$gcflags -ldflags=-s -w"
mirror=${MIRROR:-http://deb.debian.org/debian}
binaries=(containerd containerd-shim-runc-v2 ctr coredns pause)
key=$( { cat versions.env ../k8s/go.mod ../k8s/go.sum ../k8s/coredns/main.go pause.c; go version; gcc --version | head -1
	echo "$flags|${binaries[*]}|$mirror"; } | sha256sum | cut -c1-16)
root=${SOPERATOR_CACHE:-$HOME/.cache/soperator}/node/$key

complete() { for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || return 1; done; }
cache_open "$@"

apt_dir=$staging/.apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/deb"
echo "deb $mirror $CONTAINERD_SUITE main" > "$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives"
	-o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root -q
	-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
	-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
	-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false)
echo "downloading containerd $CONTAINERD_DEB ($CONTAINERD_SUITE)" >&2
apt-get "${apt_opts[@]}" update >&2
(cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" download "containerd=$CONTAINERD_DEB") >&2
dpkg-deb -x "$apt_dir"/archives/containerd_*.deb "$apt_dir/deb"
for b in containerd containerd-shim-runc-v2 ctr; do
	install -m 0755 "$apt_dir/deb/usr/bin/$b" "$staging/$b"
done
rm -rf "$apt_dir"

export CGO_ENABLED=0
echo "building coredns (../k8s/coredns, in the k8s module)" >&2
(cd ../k8s && go build -p "${K8S_BUILD_JOBS:-2}" -trimpath -gcflags "$gcflags" -ldflags "-s -w" -o "$staging/coredns" ./coredns) >&2
gcc -Os -static -o "$staging/pause" pause.c >&2
strip "$staging/pause"

cache_close "${binaries[*]}"
