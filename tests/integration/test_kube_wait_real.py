"""The kube backend's waits (KubeCluster in-process, wait=true) against the real API server, its controllers and kwok
nodes: readiness is what the real Job and StatefulSet controllers report.

- Not ready on demand: without a PersistentVolume the jail claim stays unbound, so the scheduler cannot place the
  populate Job's pod (kwok runs only pods placed on its nodes); a nodeSelector no node matches leaves the workers
  Pending until a node gets the label.
- A failed Job: kwok only completes Job pods (its pod-complete stage: exit 0). The test plays the kubelet of a node
  whose pod failed: it reports the populate container's exit (pods/status, with the pod IP kwok would have set, so no
  kwok stage takes the pod over) and places the pod on a kwok node (pods/binding). The real Job controller then marks
  the Job failed (backoffLimit 0). No kubelet serves that node, so the pod's log cannot be read: the error says so,
  with the API server's reason, instead of the log lines a real node would give.
"""
import json

import pytest
import yaml

from slurm_kube import until
from slurm_specs import SMALL_CLAIMS

from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

JOB = "small-populate-jail"


def cluster(docs, kubeconfig, **kw):
    client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm", timeout=10)
    return KubeCluster(client, build_model(load_documents(yaml.safe_dump_all(docs))),
                       KubeOptions(wait=True, poll=0.5, **kw))


def get(real_cluster, namespace, *what):
    out = real_cluster.kubectl("get", *what, "-n", namespace, "-o", "json", "--ignore-not-found").stdout
    return json.loads(out) if out.strip() else None


def items(real_cluster, namespace, *what):
    return json.loads(real_cluster.kubectl("get", *what, "-n", namespace, "-o", "json").stdout)["items"]


def job_condition(real_cluster, namespace, ctype):
    job = get(real_cluster, namespace, "job", JOB) or {}
    return any(c["type"] == ctype and c["status"] == "True" for c in (job.get("status") or {}).get("conditions") or [])


@pytest.fixture
def labelled_node(real_cluster):
    """label(key): puts the label key=yes on one kwok node; removed at the end."""
    done = []

    def label(key):
        real_cluster.kubectl("label", "node", "kwok-node-0", "%s=yes" % key)
        done.append(key)
    try:
        yield label
    finally:
        for key in done:
            real_cluster.kubectl("label", "node", "kwok-node-0", key + "-", check=False)


def test_the_wait_times_out_naming_what_is_not_ready(namespaced_spec, kubeconfig, real_cluster, volumes,
                                                     labelled_node):
    docs = namespaced_spec()
    namespace = docs[0]["metadata"]["namespace"]
    key = "soperator-it/" + namespace
    docs[1]["spec"]["nodeSelector"] = {key: "yes"}

    # No volume for the jail: its claim stays unbound and the populate Job's pod unscheduled
    with pytest.raises(BackendError) as e:
        cluster(docs, kubeconfig, wait_timeout=3).present()
    assert "timed out after 3s waiting for the jail to be populated" in str(e.value), str(e.value)
    assert "Job %s (running (0 succeeded))" % JOB in str(e.value), str(e.value)
    # the workloads that mount the jail were not applied before it was populated, nor by a re-run while it is not
    assert get(real_cluster, namespace, "statefulset", "cpu") is None
    with pytest.raises(BackendError):
        cluster(docs, kubeconfig, wait_timeout=3).present()
    assert items(real_cluster, namespace, "statefulsets") == []

    volumes(namespace, SMALL_CLAIMS)
    until("the populate Job to complete", lambda: job_condition(real_cluster, namespace, "Complete"))
    # No node has the workers' label: they stay Pending
    with pytest.raises(BackendError) as e:
        cluster(docs, kubeconfig, wait_timeout=3).present()
    message = str(e.value)
    assert "timed out after 3s waiting for the cluster to be ready" in message, message
    assert "StatefulSet cpu (0/2 ready)" in message, message
    pending = items(real_cluster, namespace, "pods", "-l", "slurm.soperator.dev/nodeset=cpu")
    assert pending and all(p["status"]["phase"] == "Pending" for p in pending), pending

    labelled_node(key)
    result = cluster(docs, kubeconfig, wait_timeout=120).present()
    assert not result["changed"] and result["status"]["phase"] == "Ready", result["status"]
    assert [w["for"] for w in result["waited"]] == ["the cluster to be ready"]


def test_a_failed_populate_job_fails_the_run_with_what_its_pod_left(namespaced_spec, kubeconfig, real_cluster):
    docs = namespaced_spec()
    namespace = docs[0]["metadata"]["namespace"]
    docs[0]["spec"]["jail"]["populate"] = {"backoffLimit": 0}
    with pytest.raises(BackendError):
        cluster(docs, kubeconfig, wait_timeout=2).present()
    [pod] = items(real_cluster, namespace, "pods", "-l", "job-name=" + JOB)
    name = pod["metadata"]["name"]
    assert not pod["spec"].get("nodeName"), pod["spec"]

    # as the kubelet would report it: the container exited 2
    container = pod["spec"]["containers"][0]
    status = {"status": {"phase": "Failed", "podIP": "10.244.255.1", "hostIP": "127.0.0.1", "containerStatuses": [{
        "name": container["name"], "image": container["image"], "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 2, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z",
                                 "finishedAt": "2026-01-01T00:00:01Z"}}}]}}
    real_cluster.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge",
                         "-p", json.dumps(status))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-node-0"}}
    real_cluster.kubectl("create", "--raw", "/api/v1/namespaces/%s/pods/%s/binding" % (namespace, name),
                         "-f", "-", input=json.dumps(binding))
    until("the Job controller to fail the Job", lambda: job_condition(real_cluster, namespace, "Failed"))

    with pytest.raises(BackendError) as e:
        cluster(docs, kubeconfig, wait_timeout=30).present()
    message = str(e.value)
    assert message.startswith("Job %s/%s failed: failed: Job has reached the specified backoff limit" % (
        namespace, JOB)), message
    # the log of the pod, as the API server answers for a node without a kubelet: unavailable, and why
    assert "\nlast lines of pod %s:\n(log unavailable: HTTP " % name in message, message
    reason = message.rsplit("(log unavailable: HTTP ", 1)[1]
    assert reason[:3].isdigit() and reason[3:5] == ": " and len(reason) > 8, message
    assert items(real_cluster, namespace, "statefulsets") == []
