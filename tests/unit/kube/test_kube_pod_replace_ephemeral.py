"""The remediation's pod replacement (kube/pod_replace.py) never deletes an ephemeral worker's pod: no StatefulSet
makes it again (the power programs do, when Slurm resumes the node), so deleting it and waiting for a new one only
removed a running worker behind Slurm's back."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.kube.pod_replace import KubeReplacer
from ansible_collections.soperator.slurm.plugins.module_utils.render.power_kube import EPHEMERAL_LABEL
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError


class Pods:
    def __init__(self, pod):
        self.pod, self.calls = pod, []

    def get(self, kind, name, namespace=None):
        self.calls.append(("get", kind, name))
        return self.pod

    def list(self, kind, namespace=None, label_selector=None):
        self.calls.append(("list", kind, label_selector))
        return []       # an ephemeral worker's pod has no StatefulSet's pod-name label

    def delete(self, kind, name, namespace=None):
        self.calls.append(("delete", kind, name))
        self.pod = None

    def apply(self, obj, force=False):
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))


def pod(labels):
    return {"metadata": {"name": "gpu-3", "uid": "u1", "labels": labels}, "spec": {"nodeName": "k1"}}


@pytest.mark.parametrize("check_mode", [False, True])
def test_an_ephemeral_workers_pod_is_not_replaced(check_mode):
    client = Pods(pod({"app.kubernetes.io/component": "worker", EPHEMERAL_LABEL: "gpu"}))
    replacer = KubeReplacer(client, "slurm", cordon=True, timeout=1, sleep=lambda s: None)
    with pytest.raises(RemediationError, match="ephemeral"):
        replacer.replace("gpu-3", check_mode=check_mode)
    assert [c[0] for c in client.calls if c[0] != "list"] == ["get"]       # no cordon, no delete
