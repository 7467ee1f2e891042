#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy, etcd and kwok from this module
# into a cache outside the checkout, keyed by what decides the binaries (versions.env, go.mod, go.sum, the Go
# version and the build flags). Prints the bin directory on stdout. A second run with the same key builds nothing.
#   build.sh --cached   print the bin directory if it is complete, else exit 1 (never builds)
#   SOPERATOR_CACHE     cache root (default ~/.cache/soperator)
#   K8S_BUILD_JOBS      go build -p (default 2: each link of kube-apiserver takes ~2 GB)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
. ../cached_build.sh
. ./versions.env

major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
# `kubectl version`, the server's /version and the nodes' kubelet version report these, not v0.0.0-master.
kv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kv+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
kwokv="-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$K8S_VERSION"
# -dwarf=false: the compiler makes no debug information, which -s -w would strip from the binaries anyway (the etcd
# server built from an empty cache here: 98 CPU s instead of 124); tools/node/build.sh passes the same, so CoreDNS
# finds these packages in the build cache.
gcflags="all=-dwarf=false"
flags="CGO_ENABLED=0 -trimpath -gcflags=$gcflags -ldflags=-s -w"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok)
# The prometheus-operator's CRDs of the kinds spec.observability renders (ServiceMonitor, PodMonitor, PrometheusRule),
# from its Go module (the proxy serves it): the real API server then validates our objects against its schemas.
PROMETHEUS_OPERATOR_VERSION=v0.85.0
prometheus_crds=(servicemonitors podmonitors prometheusrules)
# kwok does nothing without Stages (kwokctl embeds its defaults; kwok does not): the node and pod lifecycles of
# kwok's own release, copied from the module beside the binaries, for cluster.py to pass in --config.
stages=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
	pod/general/pod-create.yaml pod/general/pod-init-container-running.yaml
	pod/general/pod-init-container-completed.yaml pod/general/pod-ready.yaml pod/general/pod-complete.yaml
	pod/general/pod-delete.yaml)

key=$( { cat versions.env go.mod go.sum; go version
	echo "$flags|$kv|$kwokv|${binaries[*]}|${stages[*]}|$PROMETHEUS_OPERATOR_VERSION|${prometheus_crds[*]}"; } |
	sha256sum | cut -c1-16)
root=${SOPERATOR_CACHE:-$HOME/.cache/soperator}/k8s/$key

complete() {
	for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || return 1; done
	for s in "${stages[@]}"; do [ -f "$bin/kwok-stages/${s//\//-}" ] || return 1; done
	for c in "${prometheus_crds[@]}"; do [ -f "$bin/prometheus-operator-crds/$c.yaml" ] || return 1; done
}
cache_open "$@"
export CGO_ENABLED=0
jobs=${K8S_BUILD_JOBS:-2}
build() {  # output name, package, extra ldflags
	echo "building $1 ($2)" >&2
	go build -p "$jobs" -trimpath -gcflags "$gcflags" -ldflags "-s -w $3" -o "$staging/$1" "$2" >&2
}
# The six Kubernetes commands in one `go build` (same flags): the package graph is loaded once and the links overlap.
k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
echo "building ${k8s_cmds[*]} (k8s.io/kubernetes/cmd/...)" >&2
go build -p "$jobs" -trimpath -gcflags "$gcflags" -ldflags "-s -w $kv" -o "$staging/" "${k8s_cmds[@]/#/k8s.io/kubernetes/cmd/}" >&2
build etcd go.etcd.io/etcd/server/v3 ""
build kwok sigs.k8s.io/kwok/cmd/kwok "$kwokv"
kwok_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
mkdir "$staging/kwok-stages"
for s in "${stages[@]}"; do cp "$kwok_dir/kustomize/stage/$s" "$staging/kwok-stages/${s//\//-}"; done

po_dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
mkdir "$staging/prometheus-operator-crds"
for c in "${prometheus_crds[@]}"; do
	cp "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_$c.yaml" "$staging/prometheus-operator-crds/$c.yaml"
done

cache_close "${binaries[*]}"
