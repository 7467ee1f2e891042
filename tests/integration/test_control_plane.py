"""The control plane tools/k8s builds and starts (only when the cluster under test is one of cluster.py's):
versions set at build time, and `up` on a running cluster starts nothing."""
import importlib.util
import json
import os

import pytest

from ci_skips import environmental

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def ours(real_cluster):
    if not real_cluster.state:
        pytest.skip(environmental("the cluster of KUBECONFIG was not started by tools/k8s/cluster.py"))
    return real_cluster


def pinned(name):
    with open(os.path.join(ROOT, "tools", "k8s", "versions.env")) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))[name]


def test_client_and_server_report_the_pinned_version(ours):
    versions = json.loads(ours.kubectl("version", "-o", "json").stdout)
    assert versions["clientVersion"]["gitVersion"] == pinned("K8S_VERSION")
    assert versions["serverVersion"]["gitVersion"] == pinned("K8S_VERSION")
    assert versions["serverVersion"]["gitTreeState"] == "clean"
    nodes = json.loads(ours.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    kwok = [n for n in nodes if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"]
    assert kwok and all(n["status"]["nodeInfo"]["kubeletVersion"] == "kwok-" + pinned("KWOK_VERSION")
                        for n in kwok)


def test_up_on_a_running_cluster_starts_nothing(ours):
    spec = importlib.util.spec_from_file_location("soperator_k8s_cluster_t",
                                                  os.path.join(ROOT, "tools", "k8s", "cluster.py"))
    k8s_cluster = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(k8s_cluster)
    with open(os.path.join(ours.state, "processes.json")) as f:
        before = json.load(f)
    info = k8s_cluster.up(ours.state)
    assert info["already_up"] and info["kubeconfig"] == ours.kubeconfig
    with open(os.path.join(ours.state, "processes.json")) as f:
        assert json.load(f) == before
    assert k8s_cluster.status(ours.state)["server"] == info["server"]
