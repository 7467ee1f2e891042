"""spec.observability on Kubernetes: the exporter's Deployment, Service and least RBAC, the ServiceMonitor, the
PrometheusRule (the same rules promtool tests) and the dashboards ConfigMap; nothing while the exporter is off."""
import json

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.observe import alerts, dashboards
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import KIND_ORDER
from ansible_collections.soperator.slurm.plugins.module_utils.render import observe_objects as ro
from ansible_collections.soperator.slurm.plugins.module_utils.render.health_json import health_check_config

import test_render_kube as trk

OBSERVED = {"exporter": {"enabled": True, "port": 9400},
            "serviceMonitor": {"enabled": True, "interval": "5s", "labels": {"release": "prom"}},
            "prometheusRule": {"enabled": True, "labels": {"role": "alert-rules"}}}


def _objects(observability):
    return trk.render(trk.make_model(lambda spec: spec.update(observability=observability)))


def _observed(objects):
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects
                  if o["metadata"]["labels"].get("app.kubernetes.io/component") in (ro.EXPORTER, ro.DASHBOARDS))


def test_nothing_is_rendered_while_the_exporter_is_off():
    assert _observed(trk.render()) == []
    assert _observed(_objects({"exporter": {"enabled": False}, "serviceMonitor": {"enabled": True}})) == []


def test_the_exporter_and_what_watches_it():
    objects = _objects(OBSERVED)
    controller_monitor = trk.find(objects, "ServiceMonitor", "demo-controller")      # Slurm 26.05's own endpoints
    assert [e["path"] for e in controller_monitor["spec"]["endpoints"]] == [
        "/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler"]
    assert {e["port"] for e in controller_monitor["spec"]["endpoints"]} == {"slurmctld"}
    assert _observed(objects) == [
        ("ConfigMap", "demo-dashboards"), ("Deployment", "demo-exporter"), ("PrometheusRule", "demo-exporter"),
        ("Role", "demo-exporter"), ("RoleBinding", "demo-exporter"), ("Service", "demo-exporter"),
        ("ServiceAccount", "demo-exporter"), ("ServiceMonitor", "demo-exporter")]
    kinds = [o["kind"] for o in objects]
    assert kinds == sorted(kinds, key=KIND_ORDER.index)          # applied after what they use

    deploy = trk.find(objects, "Deployment", "demo-exporter")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == trk.make_model().images.remediation       # the runner image
    assert container["command"] == ["python3", "-m", ro.EXPORTER_MODULE]
    args = container["args"]
    assert args[args.index("--controller-pod") + 1] == "demo-controller-0"
    assert args[args.index("--kubernetes-namespace") + 1] == "hpc"
    assert args[args.index("--port") + 1] == "9400"
    assert args[args.index("--scrape-timeout") + 1] == "5"          # the ServiceMonitor's scrapeTimeout, below
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    sec = container["securityContext"]
    assert sec["runAsNonRoot"] and sec["readOnlyRootFilesystem"] and not sec["allowPrivilegeEscalation"]
    assert sec["capabilities"] == {"drop": ["ALL"]}
    assert pod["serviceAccountName"] == "demo-exporter" and pod["automountServiceAccountToken"] is True
    # the jail read-only (its free space, the health checks' status records), the remediation record's ConfigMap
    assert [v.get("persistentVolumeClaim") or v.get("configMap") for v in pod["volumes"]] == [
        {"claimName": "demo-jail", "readOnly": True}, {"name": "demo-remediation-status", "optional": True}]
    assert [(m["mountPath"], m.get("readOnly")) for m in container["volumeMounts"]] == [
        (ro.JAIL_MOUNT, True), (ro.REMEDIATION_STATUS_MOUNT, True)]
    assert args[args.index("--status-dir") + 1] == "/mnt/jail/var/lib/soperator/status"
    assert args[args.index("--remediation-record") + 1] == "/var/lib/soperator/remediation/remediation.json"
    # the checks write where the exporter reads: health.json's statusDir, in the worker pods' jail mount
    assert health_check_config(trk.make_model())["statusDir"] == args[args.index("--status-dir") + 1]
    record = trk.find(objects, "ConfigMap", "demo-remediation-status")
    assert "data" not in record and record["metadata"]["labels"]["app.kubernetes.io/component"] == "remediation"
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == ro.EXPORTER
    assert set(selector.items()) <= set(deploy["spec"]["template"]["metadata"]["labels"].items())

    # exec into the controller pod only: no other pod, no other verb, nothing else
    role = trk.find(objects, "Role", "demo-exporter")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": ["demo-controller-0"],
                              "verbs": ["create", "get"]}]
    binding = trk.find(objects, "RoleBinding", "demo-exporter")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "demo-exporter", "namespace": "hpc"}]

    svc = trk.find(objects, "Service", "demo-exporter")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]

    monitor = trk.find(objects, "ServiceMonitor", "demo-exporter")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert set(monitor["spec"]["selector"]["matchLabels"].items()) <= set(svc["metadata"]["labels"].items())
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "5s",
                                             "scrapeTimeout": "5s"}]

    rule = trk.find(objects, "PrometheusRule", "demo-exporter")
    # the exporter-down alert looks for the target the ServiceMonitor makes: job = the Service's name
    assert ro.exporter_target(trk.make_model()) == {"job": svc["metadata"]["name"], "namespace": "hpc"}
    assert rule["spec"] == alerts.rule_groups(ro.exporter_target(trk.make_model()))
    assert rule["metadata"]["labels"]["role"] == "alert-rules"

    boards = trk.find(objects, "ConfigMap", "demo-dashboards")
    assert boards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(boards["data"]) == sorted(dashboards.dashboards())
    assert all(json.loads(text)["uid"].startswith(dashboards.UID_PREFIX) for text in boards["data"].values())


def test_the_remediation_role_writes_the_exporters_kinds_only_when_there_is_one():
    def verbs(objects, resource):
        role = trk.find(objects, "Role", "demo-remediation")
        return [r["verbs"] for r in role["rules"] if resource in r["resources"]]
    assert verbs(trk.render(), "deployments") == [["list"]]
    assert verbs(trk.render(), "servicemonitors") == [["list"]]
    observed = _objects(OBSERVED)
    assert verbs(observed, "deployments") == [["list", "create", "patch", "delete"]]
    assert verbs(observed, "prometheusrules") == [["list", "create", "patch", "delete"]]


def _timeouts(observability):
    """(the ServiceMonitors' scrapeTimeouts, the exporter's --scrape-timeout)"""
    objects = _objects(observability)
    monitors = [e["scrapeTimeout"] for o in objects if o["kind"] == "ServiceMonitor" for e in o["spec"]["endpoints"]]
    args = trk.find(objects, "Deployment", "demo-exporter")["spec"]["template"]["spec"]["containers"][0]["args"]
    return sorted(set(monitors)), args[args.index("--scrape-timeout") + 1]


def test_a_long_interval_keeps_a_ten_second_timeout():
    assert _timeouts(dict(OBSERVED, serviceMonitor={"enabled": True, "interval": "2m"})) == (["10s"], "10")


def test_the_scrape_timeout_and_the_exporters_bound_are_one_value():
    exporter = dict(OBSERVED["exporter"], scrapeTimeout="3s")
    assert _timeouts(dict(OBSERVED, exporter=exporter, serviceMonitor={"enabled": True, "interval": "1m"})) == (
        ["3s"], "3")
    # never longer than the interval (Prometheus refuses that): the interval, for both
    exporter = dict(OBSERVED["exporter"], scrapeTimeout="1m")
    assert _timeouts(dict(OBSERVED, exporter=exporter, serviceMonitor={"enabled": True, "interval": "20s"})) == (
        ["20s"], "20")


def test_slurmctld_metrics_only_where_the_target_slurm_has_them():
    from dataclasses import replace
    from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
    from ansible_collections.soperator.slurm.plugins.module_utils.render.target import KUBERNETES

    model = trk.make_model(lambda spec: spec.update(observability=OBSERVED))
    assert "\nMetricsType=metrics/openmetrics\n" in render_slurm_configs(model, KUBERNETES)["slurm.conf"]
    old = replace(KUBERNETES, slurm_version=(22, 5))
    assert "MetricsType" not in render_slurm_configs(model, old)["slurm.conf"]
    assert "MetricsType" not in render_slurm_configs(trk.make_model(), KUBERNETES)["slurm.conf"]


def test_with_a_backup_controller_the_exporter_may_exec_into_both_pods(monkeypatch):
    objects = trk.render(trk.make_model(lambda spec: spec.update(
        observability=OBSERVED, controller={"replicas": 2, "spool": {"size": "1Gi", "accessModes": ["ReadWriteMany"]}})))
    args = trk.container(trk.find(objects, "Deployment", "demo-exporter"))["args"]
    assert args[args.index("--controller-pod") + 1] == "demo-controller-0"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--standby-pod"] == ["demo-controller-1"]
    role = trk.find(objects, "Role", "demo-exporter")
    assert role["rules"][0]["resourceNames"] == ["demo-controller-0", "demo-controller-1"]
    # the exporter's own parsing of those arguments: the transport tries the backup's pod after the primary's
    import kubernetes
    from ansible_collections.soperator.slurm.plugins.module_utils.observe import exporter
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda: None)
    seen = []
    monkeypatch.setattr(exporter, "KubernetesTransport", lambda *a, **kw: seen.append((a, kw)))

    class Parsed(Exception):
        pass

    def stop(*a, **kw):
        raise Parsed()
    monkeypatch.setattr(exporter, "start_http_server", stop)
    with pytest.raises(Parsed):
        exporter.main(args)
    ((pos, kw),) = seen
    assert pos == ("hpc", "demo-controller-0") and kw["standby_pods"] == ["demo-controller-1"]
