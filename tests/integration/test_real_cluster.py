"""slurm_cluster on a real Kubernetes cluster (conftest.py: KUBECONFIG, or the control plane tools/k8s builds), judged
by the module's own request counts, so it runs on any cluster, with or without a readable audit log: check mode on
an empty namespace, the first run creating what it planned, a re-run writing nothing.

Runs in a fresh namespace that it deletes at the end (volumes included). It needs the right to manage CRDs. The
module's other behaviours (a spec change, secrets, volumes, retries, timeouts, absent) are in
test_slurm_cluster_real.py, counted from the audit log and through the fault proxy.
"""
import pytest

from slurm_specs import SMALL_CLAIMS as CLAIMS, changed, module


@pytest.fixture
def docs(namespaced_spec):
    """examples/small-cpu.yml in a namespace of its own (conftest.py's namespaced_spec: removed at the end)."""
    return namespaced_spec()


def run(documents, kubeconfig, **kw):
    # Waits until Ready: a re-run then finds the status final (the controllers and kwok have caught up), as a
    # re-run a while later would.
    args = dict(state="present", target="kubernetes", definition=documents, kubeconfig=kubeconfig, wait=True,
                wait_timeout=120)
    args.update(kw)
    return module("slurm_cluster", **args)


def test_plan_apply_and_rerun(docs, kubeconfig, volumes):
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
