"""The real-node suite: the cluster of `site.yml` in real pods (tools/k8s/node.py: kubelet, containerd, kube-proxy,
CoreDNS) with the images of `make images`, on a control plane of its own in a temporary directory.

Needs root, `make k8s-build` (the control plane, kubelet, kube-proxy and the node's containerd and CoreDNS) and
`make images`; CI has them all, so a skip here fails under CI=true. The real node is one per machine: the suite
fails (does not wait) when another real node runs here.

Under pytest-xdist the suite's files run in two workers (tests/xdist_groups.py: two lanes, most of their time spent
waiting on Slurm's timers and pods), which share one node: the first to need it starts it, each one using it counts
itself in, and the last one out stops it (a file lock in the session's shared temporary directory). Each file has a
namespace of its own; the workers' pods fit the node's 2 CPUs together (each file's CPU requests say so).
"""
import contextlib
import fcntl
import importlib.util
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster_realnode",
                                               os.path.join(ROOT, "tools", "k8s", "cluster.py"))
k8s_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s_cluster)


class Node:
    def __init__(self, info, bin_dir):
        self.info, self.kubeconfig = info, info["kubeconfig"]
        self.kubectl_path = os.path.join(bin_dir, "kubectl")

    def kubectl(self, *args, check=True, timeout=120):
        proc = subprocess.run([self.kubectl_path, "--kubeconfig", self.kubeconfig] + list(args),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert proc.returncode == 0, "kubectl %s: rc %d\n%s%s" % (
                " ".join(args), proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        return proc


@contextlib.contextmanager
def _shared(shared_dir):
    """The record of the node this session's workers share ({} when none runs), under an exclusive lock; what the
    block leaves in it is written back."""
    with open(os.path.join(shared_dir, "realnode.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = os.path.join(shared_dir, "realnode.json")
        try:
            with open(path) as f:
                record = json.load(f)
        except FileNotFoundError:
            record = {}
        yield record
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)


@pytest.fixture(scope="session")
def real_node(tmp_path_factory, worker_id):
    if os.geteuid() != 0:
        pytest.skip("a real node needs root")
    bin_dir = k8s_cluster.cached_bin()
    if not bin_dir or not k8s_cluster.real_node.node_bin(cached=True):
        pytest.skip("the control plane or the node's binaries are not built (make k8s-build)")
    if not k8s_cluster.real_node.default_images():
        pytest.skip("no images of the default tag in podman's storage (make images)")
    # The session's own directory, which every xdist worker's basetemp is in (the workers' lock and record).
    base = tmp_path_factory.getbasetemp()
    shared_dir = str(base.parent if worker_id != "master" else base)
    with _shared(shared_dir) as record:
        if not record.get("users"):
            # Short: containerd's socket paths below it must fit a unix socket's 108 bytes.
            state = os.path.join(shared_dir, "rn")
            record.clear()
            try:
                record["info"] = k8s_cluster.up(state, bin_dir, timeout=180, node="real")
            except BaseException:
                k8s_cluster.down(state)
                raise
            record["state"] = state
        record["users"] = record.get("users", 0) + 1
        info, state = record["info"], record["state"]
    try:
        yield Node(info, bin_dir)
    finally:
        with _shared(shared_dir) as record:
            record["users"] -= 1
            if not record["users"]:
                k8s_cluster.down(state)
                record.clear()
