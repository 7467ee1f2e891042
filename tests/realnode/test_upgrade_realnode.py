"""A Slurm version upgrade on a real node (kubelet + containerd, the images of `make images` of two Slurm versions):
a small cluster with accounting in the cluster at 24.11 (the images tagged 24.11.5-0.1.0, imported into the node's
containerd here) moves to the default tag (26.05). What the kwok suite (tests/integration/test_upgrade_real.py)
cannot judge is judged here: the dump Job's mariadb-dump really reads the 24.11 slurmdbd's database and leaves a
whole dump on the backup claim before slurmdbd moves; slurmctld's StateSaveLocation is copied; the real slurmdbd 26.05
and slurmctld 26.05 then start on the converted database and state.
"""
import functools
import importlib.util
import json
import os

import pytest
import yaml

import ansible_run
from realnode_wait import wait

OLD_TAG = "24.11.5-0.1.0"
NS = "upg"
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: upg, namespace: upg}
spec:
  jail: {volume: {size: 1Gi}}
  login: {replicas: 0}
  accounting: {enabled: true, database: {inCluster: {storage: 1Gi}}}
  remediation: {enabled: false}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: upg}
spec:
  clusterName: upg
  replicas: 1
  resources: {cpu: 500m, memory: 1Gi}   # the other lane's pods share the 2-CPU node (conftest.py)
  slurmNode: {cpus: 1}
  updateStrategy: {type: onDelete}
"""
# what `make images-trixie` builds: the old cluster's pods' images (login.replicas 0: no login pod pulls one)
COMPONENTS = ("controller", "worker", "accounting", "jail", "mariadb")
_wait = functools.partial(wait, timeout=300)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _node_module():
    """tools/k8s/node.py (save_image, podman's environment), by file: tools/k8s is no package."""
    spec = importlib.util.spec_from_file_location("soperator_k8s_node_upgrade",
                                                  os.path.join(ROOT, "tools", "k8s", "node.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wait_for_old_images():
    """.ci/run starts this suite before its images lane has built the 24.11 images (they are only for this test, the
    suite's last) and names in SOPERATOR_OLD_IMAGES_PENDING the file it writes once they are built; the lane's failure
    writes build/ci/failed beside it. Without the variable nothing is waited for."""
    marker = os.environ.get("SOPERATOR_OLD_IMAGES_PENDING")
    if not marker:
        return
    failed = os.path.join(os.path.dirname(marker), "failed")
    wait("the images of %s (%s)" % (OLD_TAG, marker),
         lambda: (os.path.exists(marker) or os.path.exists(failed), None), timeout=2400, poll=5)
    assert os.path.exists(marker), "a CI stage failed before the images of %s were built (%s)" % (OLD_TAG, failed)


def _import_old_images(real_node, registry, tmp_path):
    node = _node_module()
    _wait_for_old_images()
    have = node._run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                     env=node._containers_env()).stdout.split()
    refs = ["%s/%s:%s" % (registry, c, OLD_TAG) for c in COMPONENTS]
    missing = [r for r in refs if r not in have]
    if missing:
        pytest.skip("no images of %s in podman's storage (make images with the trixie suite): %s" % (
            OLD_TAG, ", ".join(missing)))
    ctr = real_node.info["real_node"]["ctr"]
    for ref in refs:
        path = str(tmp_path / "image.tar")
        node.save_image(ref, path)
        node._run(ctr + ["images", "import", "--local", path])      # raises on failure
        os.remove(path)


def _converge(docs, real_node):
    return ansible_run.module("slurm_cluster", dict(
        state="present", target="kubernetes", definition=docs, kubeconfig=real_node.kubeconfig, wait=True,
        wait_timeout=600), expect_failed=False)


def _exec(real_node, pod, *argv):
    return real_node.kubectl("-n", NS, "exec", pod, "--", *argv, check=False, timeout=120)


def test_a_slurm_upgrade_dumps_the_real_database_first(real_node, tmp_path):
    registry = next(r for r in real_node.info["real_node"]["images"] if "/controller:" in r).rsplit("/", 1)[0]
    _import_old_images(real_node, registry, tmp_path)
    docs = list(yaml.safe_load_all(SPEC))
    docs[0]["spec"]["images"] = {"tag": OLD_TAG, "mariadb": "%s/mariadb:%s" % (registry, OLD_TAG)}
    try:
        first = _converge(docs, real_node)
        assert first["status"]["phase"] == "Ready", first["status"]
        # slurmctld 24.11 registered the cluster with slurmdbd 24.11
        _wait("the cluster registered in the accounting database", lambda: (
            "upg" in _exec(real_node, "upg-controller-0", "sacctmgr", "-n", "-P", "show", "cluster",
                           "format=cluster").stdout, None))

        docs[0]["spec"]["images"]["tag"] = real_node.info["real_node"]["images"][0].rsplit(":", 1)[1]
        result = _converge(docs, real_node)
        upgrade = result["upgrade"]
        assert [(p["phase"], p["status"]) for p in upgrade["phases"]][:4] == [
            ("backup-database", "done"), ("slurmdbd", "ready"), ("save-slurmctld-state", "done"),
            ("slurmctld", "ready")], upgrade
        assert upgrade["versions"]["slurmdbd/upg-accounting"].startswith("24.11.5 -> 26.05."), upgrade

        # The dump on the backup claim's volume (the node's hostPath provisioner): whole, of the 24.11 database
        claim = json.loads(real_node.kubectl("-n", NS, "get", "pvc", upgrade["backup"]["claim"], "-o",
                                             "json").stdout)
        pv = json.loads(real_node.kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "json").stdout)
        root = pv["spec"]["hostPath"]["path"]
        with open(os.path.join(root, upgrade["backup"]["dump"])) as f:
            dump = f.read()
        assert "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `slurm_acct_db`" in dump, dump[:2000]
        assert "INSERT INTO `cluster_table`" in dump and "'upg'" in dump, dump[:2000]
        assert dump.rstrip().endswith("-- Dump completed") or "-- Dump completed" in dump[-300:], dump[-300:]
        assert not os.path.exists(os.path.join(root, upgrade["backup"]["dump"] + ".partial"))
        # slurmctld's state: its saved files (node_state, job_state...) copied aside
        saved = os.listdir(os.path.join(root, upgrade["backup"]["state"]))
        assert "node_state" in saved and "job_state" in saved, saved

        # slurmdbd 26.05 runs on the converted database, slurmctld 26.05 talks to it
        out = _exec(real_node, "upg-controller-0", "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
        assert "upg" in out.stdout, out.stdout + out.stderr
        version = _exec(real_node, "upg-controller-0", "scontrol", "version").stdout
        assert version.split()[-1].startswith("26.05."), version     # Debian's: "slurm-wlm 26.05.5"

        again = _converge(docs, real_node)
        assert again["upgrade"] is None and not again["changed"], again
    finally:
        real_node.kubectl("delete", "namespace", NS, "--wait=true", timeout=300, check=False)
