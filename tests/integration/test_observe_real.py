"""spec.observability against a real API server: the exporter's Deployment, Service, ServiceAccount, Role and
RoleBinding and the dashboards ConfigMap apply; the scheduler places the exporter's pod (kwok runs it); a re-run
changes nothing; the exporter's ServiceAccount may exec into the controller pod and nothing else; switching the
exporter off prunes every one of them. examples/logging/soperator-logs.alloy (the Grafana Alloy example that
ships these pods' logs to Loki) on the same pods: its label selector, asked of the API server, finds ours and not a
pod without our managed-by label; its relabel rules, run by a real Prometheus over those pods' discovery labels, give
one target per container, labelled by cluster, component, NodeSet and daemon. With the prometheus-operator's own CRDs
installed (tools/k8s/build.sh takes them from its Go module), the ServiceMonitors and the PrometheusRule apply: the
real server validates them against the operator's schemas."""
import copy
import glob
import json
import os
import re

import pytest

import logging_example
from prometheus_server import PROMETHEUS, Prometheus, free_ports
from test_real_cluster import CLAIMS, docs, run  # noqa: F401 (the docs fixture) pylint: disable=unused-import
from waiting import wait_for

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


def _meta_labels(pod, container):
    """The labels Prometheus' Kubernetes discovery (role pod) gives one container, under their documented names."""
    labels = {"__meta_kubernetes_namespace": pod.metadata.namespace, "__meta_kubernetes_pod_name": pod.metadata.name,
              "__meta_kubernetes_pod_container_name": container, "__meta_kubernetes_pod_uid": pod.metadata.uid}
    for name, value in pod.metadata.labels.items():
        labels["__meta_kubernetes_pod_label_" + re.sub("[^a-zA-Z0-9_]", "_", name)] = value
    return labels


def _logging_example_targets(api, namespace, workdir):
    """The Alloy example's pod selector, asked of the real API server, and its relabel rules, run by a real
    Prometheus (the relabelling code Alloy shares) over each selected container's discovery labels (Debian's
    Prometheus has no Kubernetes discovery: file discovery with the labels it would give). -> (the pods of ours,
    {(pod, container): labels once every container of ours is a target})."""
    from kubernetes import client
    core = client.CoreV1Api(api)
    # a Slurm-looking pod that soperator.slurm did not make
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "not-ours",
                     "labels": {"app.kubernetes.io/name": "slurm", "app.kubernetes.io/instance": "small"}},
        "spec": {"containers": [{"name": "slurmd", "image": "example.invalid/slurmd"}]}})
    (selector,) = logging_example.selectors()
    assert selector["role"] == "pod", selector
    selected = core.list_namespaced_pod(namespace, label_selector=selector["label"]).items
    ours = core.list_namespaced_pod(
        namespace, label_selector="%s=%s" % ("app.kubernetes.io/managed-by", "soperator.slurm")).items
    assert sorted(p.metadata.name for p in selected) == sorted(p.metadata.name for p in ours), selected
    expected = dict(((p.metadata.name, c.name), p) for p in ours
                    for c in (p.spec.init_containers or []) + p.spec.containers)
    groups = [{"targets": ["%s.%s:%d" % (pod, namespace, index)], "labels": _meta_labels(p, container)}
              for index, ((pod, container), p) in enumerate(sorted(expected.items()))]
    discovered = os.path.join(workdir, "pods.json")
    with open(discovered, "w") as f:
        json.dump(groups, f)
    prometheus = Prometheus(free_ports(1)[0], workdir, {
        "global": {"scrape_interval": "1h"},
        "scrape_configs": [{"job_name": "soperator-logs", "file_sd_configs": [{"files": [discovered]}],
                            "relabel_configs": logging_example.relabel_configs()}]})
    try:
        wait_for(prometheus.ready, "prometheus ready", 60)
        targets = wait_for(
            lambda: dict(((t["labels"].get("pod"), t["labels"].get("container")), t["labels"])
                         for t in prometheus.api("targets", state="active")["activeTargets"]),
            "a target per container of ours", 60, poll=1, done=lambda got: set(got) == set(expected))
    finally:
        prometheus.stop()
    return expected, targets


def test_the_exporter_applies_runs_and_is_pruned(observed, kubeconfig, real_cluster, volumes, tmp_path):
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
        # the Deployment controller, the scheduler and kwok: a Ready replica
        wait_for(lambda: apps.read_namespaced_deployment_status("small-exporter", namespace).status,
                 "a ready replica of the exporter Deployment", 120, poll=1,
                 done=lambda status: status.ready_replicas == 1)
        pods = client.CoreV1Api(api).list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=exporter").items
        assert len(pods) == 1 and pods[0].spec.node_name, pods
        assert pods[0].spec.service_account_name == "small-exporter"

        assert PROMETHEUS, "prometheus is not installed (make deps installs it)"
        expected, targets = _logging_example_targets(api, namespace, str(tmp_path))
        assert {"controller", "worker", "login", "exporter"} <= set(t["component"] for t in targets.values()), targets
        for (pod, container), labels in targets.items():
            pod_labels = expected[(pod, container)].metadata.labels
            assert labels["namespace"] == namespace and labels["slurm_cluster"] == "small", labels
            assert labels["component"] == pod_labels["app.kubernetes.io/component"], labels
            assert labels.get("nodeset") == pod_labels.get("slurm.soperator.dev/nodeset"), labels
            assert labels["daemon"] == container, labels
        assert targets[("cpu-0", "slurmd")]["nodeset"] == "cpu"
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


def test_service_monitors_and_rules_apply_to_the_operators_crds(observed, kubeconfig, real_cluster, volumes):
    from kubernetes import client, config
    bin_dir = os.path.dirname(real_cluster.kubectl("version", "--client", "-o", "json", check=False).args[0])
    crds = sorted(glob.glob(os.path.join(bin_dir, "prometheus-operator-crds", "*.yaml")))
    assert len(crds) == 3, "tools/k8s/build.sh copies the ServiceMonitor, PodMonitor and PrometheusRule CRDs"
    for path in crds:      # cluster-wide and kept: another run's objects may use them
        real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", path)
    for crd in ("servicemonitors", "podmonitors", "prometheusrules"):
        # (kubectl wait fails at once while a new CRD has no conditions yet; a get that fails - a busy machine's
        # slow API server - is asked again until the deadline, which reports what it said: the last
        # CompletedProcess, its returncode, stdout and stderr)
        wait_for(lambda name=crd: real_cluster.kubectl(
            "get", "crd", name + ".monitoring.coreos.com", "-o",
            'jsonpath={.status.conditions[?(@.type=="Established")].status}', check=False),
            "the %s CRD to be Established" % crd, 60,
            done=lambda got: got.returncode == 0 and got.stdout == "True")
    docs = observed
    docs[0]["spec"]["observability"].update(serviceMonitor={"enabled": True, "labels": {"release": "kube-prom"}},
                                            prometheusRule={"enabled": True})
    namespace = docs[0]["metadata"]["namespace"]
    volumes(namespace, CLAIMS)
    first = run(docs, kubeconfig)
    made = set((o["kind"], o["name"]) for o in first["objects"] if o["action"] == "created")
    assert {"ServiceMonitor", "PrometheusRule"} <= set(kind for kind, dummy in made), made
    second = run(docs, kubeconfig)
    assert not second["changed"] and second["requests"]["writes"] == 0, [
        (o["kind"], o["name"], o["action"]) for o in second["objects"] if o["action"] != "unchanged"]

    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        custom = client.CustomObjectsApi(api)
        rules = custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", namespace, "prometheusrules")
        alerts = [r["alert"] for rule in rules["items"] for g in rule["spec"]["groups"] for r in g["rules"]
                  if "alert" in r]
        assert "SlurmRemediationFailing" in alerts and len(alerts) >= 8, alerts
        monitors = custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", namespace, "servicemonitors")
        assert monitors["items"] and all(m["metadata"]["labels"].get("release") == "kube-prom"
                                         for m in monitors["items"]), monitors["items"]
    finally:
        api.close()
