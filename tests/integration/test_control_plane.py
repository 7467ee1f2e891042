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


def test_k8s_up_binds_claims_through_its_provisioner(ours, tmp_path):
    """`make k8s-up` (kwok nodes) runs the real node's hostPath provisioner with a default StorageClass: a claim
    that names no class binds (site.yml waits for its claims), and deleting it removes the volume and its folder.
    A control plane of its own (the session's pre-binds its volumes and has no default class); stopped by pid."""
    import subprocess
    from kubernetes import client, config
    from waiting import wait_for
    bin_dir = os.path.dirname(ours.kubectl("version", "--client", "-o", "json", check=False).args[0])
    tool = os.path.join(ROOT, "tools", "k8s", "cluster.py")
    state = str(tmp_path / "k8s")
    try:
        up = subprocess.run(["python3", tool, "up", "--state", state, "--bin", bin_dir, "--nodes", "1"],
                            capture_output=True, text=True, timeout=600, check=False)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "and the hostPath provisioner (default StorageClass soperator-hostpath)" in up.stdout
        api = config.new_client_from_config(config_file=os.path.join(state, "kubeconfig"))
        try:
            core = client.CoreV1Api(api)
            core.create_namespaced_persistent_volume_claim("default", {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "jail"},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
            claim = wait_for(lambda: core.read_namespaced_persistent_volume_claim("jail", "default"),
                             "the claim to bind", 120, done=lambda got: got.status.phase == "Bound")
            assert claim.spec.storage_class_name == "soperator-hostpath"
            volume = core.read_persistent_volume(claim.spec.volume_name)
            folder = volume.spec.host_path.path
            assert os.path.dirname(folder) == os.path.join(os.path.realpath(state), "volumes")
            assert os.path.isdir(folder)
            core.delete_namespaced_persistent_volume_claim("jail", "default")
            wait_for(lambda: ([v.metadata.name for v in core.list_persistent_volume().items], os.path.exists(folder)),
                     "the volume and its folder to be reclaimed", 120, done=lambda got: got == ([], False))
        finally:
            api.close()
    finally:
        down = subprocess.run(["python3", tool, "down", "--state", state], capture_output=True, text=True,
                              timeout=300, check=False)
    assert down.returncode == 0 and "provisioner" in down.stdout, down.stdout + down.stderr
