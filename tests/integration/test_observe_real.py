"""spec.observability against a real API server: the exporter's Deployment, Service, ServiceAccount, Role and
RoleBinding and the dashboards ConfigMap apply; the scheduler places the exporter's pod (kwok runs it); a re-run
changes nothing; the exporter's ServiceAccount may exec into the controller pod and nothing else; switching the
exporter off prunes every one of them. The prometheus-operator's kinds are not served here: their objects are
tested as rendered (tests/unit/test_render_observe.py)."""
import copy
import time

import pytest

from test_real_cluster import CLAIMS, docs, run  # noqa: F401 (the docs fixture) pylint: disable=unused-import

OBSERVED = {("Deployment", "small-exporter"), ("Service", "small-exporter"), ("ServiceAccount", "small-exporter"),
            ("Role", "small-exporter"), ("RoleBinding", "small-exporter"), ("ConfigMap", "small-dashboards")}


@pytest.fixture
def observed(docs):
    """examples/small-cpu.yml in a namespace of its own (test_real_cluster's docs: removed at the end), exporter on."""
    docs[0]["spec"]["observability"] = {"exporter": {"enabled": True}}
    return docs


def _can_i(real_cluster, namespace, verb, resource, subresource=None):
    argv = ["auth", "can-i", verb, resource, "-n", namespace, "--as=system:serviceaccount:%s:small-exporter" % namespace]
    if subresource:
        argv.append("--subresource=%s" % subresource)
    return real_cluster.kubectl(*argv, check=False).stdout.strip()


def test_the_exporter_applies_runs_and_is_pruned(observed, kubeconfig, real_cluster, volumes):
    docs = observed
    namespace = docs[0]["metadata"]["namespace"]
    volumes(namespace, CLAIMS)
    first = run(docs, kubeconfig)
    made = set((o["kind"], o["name"]) for o in first["objects"] if o["action"] == "created")
    assert OBSERVED <= made, made

    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        apps = client.AppsV1Api(api)
        deadline = time.monotonic() + 120
        while True:          # the Deployment controller, the scheduler and kwok: a Ready replica
            status = apps.read_namespaced_deployment_status("small-exporter", namespace).status
            if status.ready_replicas == 1:
                break
            assert time.monotonic() < deadline, "the exporter Deployment has no ready replica: %s" % status
            time.sleep(1)
        pods = client.CoreV1Api(api).list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=exporter").items
        assert len(pods) == 1 and pods[0].spec.node_name, pods
        assert pods[0].spec.service_account_name == "small-exporter"
    finally:
        api.close()

    second = run(docs, kubeconfig)
    assert not second["changed"] and second["requests"]["writes"] == 0, [
        (o["kind"], o["name"], o["action"]) for o in second["objects"] if o["action"] != "unchanged"]

    # its ServiceAccount execs into the controller pod, and can do nothing else
    assert _can_i(real_cluster, namespace, "create", "pods/small-controller-0", "exec") == "yes"
    assert _can_i(real_cluster, namespace, "create", "pods/small-cpu-0", "exec") == "no"
    assert _can_i(real_cluster, namespace, "get", "secrets") == "no"
    assert _can_i(real_cluster, namespace, "list", "pods") == "no"
    assert _can_i(real_cluster, namespace, "delete", "pods/small-controller-0") == "no"

    off = copy.deepcopy(docs)
    off[0]["spec"]["observability"] = {"exporter": {"enabled": False}}
    # slurm.conf loses MetricsType with the exporter; the reconfigure that follows execs into the controller pod,
    # which needs a kubelet (kwok has none: that is the real node's suite)
    pruned = run(off, kubeconfig, reconfigure=False)
    gone = set((o["kind"], o["name"]) for o in pruned["objects"] if o["action"] == "pruned")
    assert OBSERVED <= gone, gone
