"""The emulator scenario of tests/kube, unchanged, against a real Kubernetes cluster (conftest.py: KUBECONFIG, or
the control plane tools/k8s builds).

Runs in a fresh namespace that it deletes at the end (volumes included). It needs the right to manage CRDs. Pods
need the images, which the suite does not build, so it does not wait for readiness; the safe scale-down needs
Slurm in the pods and stays in tests/kube (emulator + real local Slurm).
"""
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kube"))
from test_slurm_cluster_kube import SMALL, module, spec_docs  # noqa: E402


# The claims of examples/small-cpu.yml: the jail and the controller's spool (its StatefulSet's claim template).
CLAIMS = ("small-jail", "spool-small-controller-0")


@pytest.fixture
def docs(kubeconfig):
    namespace = "soperator-it-%s" % uuid.uuid4().hex[:8]
    documents = spec_docs(SMALL)
    for d in documents:
        d["metadata"]["namespace"] = namespace
    yield documents
    module("slurm_cluster", state="absent", target="kubernetes", definition=documents,
           kubeconfig=kubeconfig, purge_volumes=True)
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        client.CoreV1Api(api).delete_namespace(namespace)
    finally:
        api.close()


def run(documents, kubeconfig, **kw):
    # Waits until Ready: a re-run then finds the status final (the controllers and kwok have caught up), as a
    # re-run a while later would.
    args = dict(state="present", target="kubernetes", definition=documents, kubeconfig=kubeconfig, wait=True,
                wait_timeout=120)
    args.update(kw)
    return module("slurm_cluster", **args)


def changed(result):
    return sorted((o["kind"], o["name"], o["action"]) for o in result["objects"] if o["action"] != "unchanged")


def test_apply_rerun_plan_and_change(docs, kubeconfig, volumes):
    volumes(docs[0]["metadata"]["namespace"], CLAIMS)
    planned = module(
        "slurm_cluster", check=True, state="present", target="kubernetes", definition=docs,
        kubeconfig=kubeconfig)
    assert planned["changed"] and planned["requests"]["writes"] == 0
    first = run(docs, kubeconfig)
    assert [(o["kind"], o["name"]) for o in first["objects"]] == [(o["kind"], o["name"]) for o in planned["objects"]]
    # The CRDs are cluster-wide: an earlier test (or run) may have installed them already.
    assert set(o["action"] for o in first["objects"] if o["kind"] != "CustomResourceDefinition") <= {
        "created", "updated"}
    second = run(docs, kubeconfig)
    assert not second["changed"] and second["requests"]["writes"] == 0, changed(second)
    docs[0]["spec"]["login"]["replicas"] = 2
    plan = module("slurm_cluster", check=True, state="present", target="kubernetes", definition=docs,
                  kubeconfig=kubeconfig)
    done = run(docs, kubeconfig)
    assert changed(plan) == changed(done) == [("SlurmCluster", "small", "updated"),
                                              ("StatefulSet", "small-login", "updated")]
