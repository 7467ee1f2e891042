"""KubeCluster in-process against an emulator whose controllers do nothing: readiness comes only from set_status, so
the wait and its timeout are driven by the test."""
import os

import pytest

from emulator import KubeEmulator
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import BackendError, KubeCluster
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model, load_documents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def idle_emulator(tmp_path):
    emu = KubeEmulator(simulate_controllers=False)
    emu.start()
    try:
        yield emu, emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    finally:
        emu.stop()


def small():
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        return build_model(load_documents(f.read()))


def cluster(kubeconfig, **kw):
    client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm")
    return KubeCluster(client, small(), wait=True, poll=0.1, **kw)


def test_wait_times_out_naming_what_is_not_ready(idle_emulator):
    emu, kubeconfig = idle_emulator
    with pytest.raises(BackendError) as e:
        cluster(kubeconfig, wait_timeout=1).present()
    assert "waiting for the jail to be populated" in str(e.value)
    assert "Job small-populate-jail" in str(e.value)
    # the workloads were not applied before the jail was populated, nor by a re-run while it is not
    assert emu.get("apps/v1", "StatefulSet", "cpu", "slurm") is None
    with pytest.raises(BackendError):
        cluster(kubeconfig, wait_timeout=1).present()
    assert emu.get("apps/v1", "StatefulSet", "cpu", "slurm") is None

    emu.set_status("batch/v1", "Job", "small-populate-jail", "slurm", {
        "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    with pytest.raises(BackendError) as e:
        cluster(kubeconfig, wait_timeout=1).present()
    message = str(e.value)
    assert "waiting for the cluster to be ready" in message
    assert "StatefulSet cpu (0/2 ready)" in message and "StatefulSet small-controller (0/1 ready)" in message

    for name, replicas in (("small-controller", 1), ("small-login", 1), ("cpu", 2)):
        sts = emu.get("apps/v1", "StatefulSet", name, "slurm")
        emu.set_status("apps/v1", "StatefulSet", name, "slurm", {
            "replicas": replicas, "readyReplicas": replicas, "observedGeneration": sts["metadata"]["generation"]})
    result = cluster(kubeconfig, wait_timeout=5).present()
    assert not result["changed"] and result["status"]["phase"] == "Ready"
    assert [w["for"] for w in result["waited"]] == ["the cluster to be ready"]


def test_a_failed_populate_job_fails_with_its_pod_log(idle_emulator):
    emu, kubeconfig = idle_emulator
    with pytest.raises(BackendError):
        cluster(kubeconfig, wait_timeout=1).present()
    emu.put_object({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "small-populate-jail-x1", "namespace": "slurm", "labels": {"job-name": "small-populate-jail"}},
        "spec": {"containers": [{"name": "populate", "image": "i"}]}})
    emu.set_pod_log("slurm", "small-populate-jail-x1", "tar: rootfs.tar: Cannot open: No such file\n")
    emu.set_status("batch/v1", "Job", "small-populate-jail", "slurm", {
        "failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                     "message": "Job has reached the specified backoff limit"}]})
    with pytest.raises(BackendError) as e:
        cluster(kubeconfig, wait_timeout=5).present()
    assert "failed" in str(e.value) and "Cannot open: No such file" in str(e.value)
