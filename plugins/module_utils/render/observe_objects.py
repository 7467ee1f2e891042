# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes objects of spec.observability: the exporter (Deployment, Service, and the RBAC to exec Slurm
commands in the controller pod; the jail, for its free space and the health checks' status records, and the
remediation record's ConfigMap, both mounted read-only), a ServiceMonitor and a PrometheusRule for the prometheus-operator, and the Grafana
dashboards as a ConfigMap. Pure, like kube_objects.py, whose building blocks it uses."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.observe import alerts, dashboards
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_builders as kb
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import slurmctld_metrics
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import STATUS_DIR
from ansible_collections.soperator.slurm.plugins.module_utils.observe.remediation_record import RECORD_KEY
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (
    controller_name, exporter_name, remediation_status_name, service_account_name)

EXPORTER = "exporter"
DASHBOARDS = "dashboards"
EXPORTER_MODULE = "ansible_collections.soperator.slurm.plugins.module_utils.observe.exporter"
# Where the runner image installs the collection (images/remediation): the exporter imports it from there.
RUNNER_COLLECTIONS = "/usr/share/ansible/collections"
RUNNER_UID = 1000
JAIL_MOUNT = "/mnt/jail"
# The remediation record's ConfigMap (observe/remediation_record.py), mounted read-only.
REMEDIATION_STATUS_MOUNT = "/var/lib/soperator/remediation"


def controller_pods(model):
    """The controller pods, the primary first (spec.controller.replicas 2: the backup's pod after it)."""
    return ["%s-%d" % (controller_name(model), i) for i in range(model.controller.replicas)]


def exporter_rules(model):
    """The exporter's namespaced permissions: exec Slurm's read-only commands in the controller pod, nothing else.
    The python client execs over a websocket (an HTTP GET, authorized as get before Kubernetes 1.31 and as create
    since)."""
    return [{"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": controller_pods(model),
             "verbs": ["create", "get"]}]


def _exporter(model):
    name = exporter_name(model)
    port = model.observability.exporter.port
    # the health checks' last results, in the jail (health.json's statusDir); the remediation record's ConfigMap
    extra_args, mounts, volumes = ["--status-dir", JAIL_MOUNT + STATUS_DIR], [], []
    if model.remediation.enabled:
        extra_args += ["--remediation-record", "%s/%s" % (REMEDIATION_STATUS_MOUNT, RECORD_KEY)]
        mounts.append(kb.mount("remediation-status", REMEDIATION_STATUS_MOUNT, read_only=True))
        volumes.append({"name": "remediation-status", "configMap": {"name": remediation_status_name(model),
                                                                    "optional": True}})
    container = kb.container(
        model, EXPORTER, model.images.remediation, ports=[("metrics", port)],
        command=["python3", "-m", EXPORTER_MODULE],
        args=["--port", str(port), "--listen-address", "0.0.0.0", "--kubernetes-namespace", model.namespace,
              "--controller-pod", controller_pods(model)[0], "--controller-container", "slurmctld",
              "--reason-prefix", model.remediation.drain_reason_prefix, "--jail", JAIL_MOUNT,
              "--scrape-timeout", str(model.observability.scrape_timeout_seconds)] + extra_args +
        [arg for pod in controller_pods(model)[1:] for arg in ("--standby-pod", pod)],
        env=[{"name": "PYTHONPATH", "value": RUNNER_COLLECTIONS}],
        # the jail read-only: its filesystem's size and free space (slurm_jail_filesystem_*)
        mounts=[kb.mount("jail", JAIL_MOUNT, read_only=True)] + mounts,
        resources={"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        # a scrape runs Slurm commands: the probes only check that the server listens
        probe_port="metrics",
        security={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                  "runAsUser": RUNNER_UID, "capabilities": {"drop": ["ALL"]},
                  "seccompProfile": {"type": "RuntimeDefault"}})
    jail = kb.jail_volume(model)
    jail["persistentVolumeClaim"]["readOnly"] = True
    pod = kb.pod_spec(model, EXPORTER, [container], [jail] + volumes, scheduling=model.controller.scheduling,
                      api_access=True)
    subject = [{"kind": "ServiceAccount", "name": service_account_name(model, EXPORTER),
                "namespace": model.namespace}]
    return [
        kb.obj("ServiceAccount", kb.meta(model, service_account_name(model, EXPORTER), EXPORTER),
               automountServiceAccountToken=True),
        kb.obj("Role", kb.meta(model, name, EXPORTER), rules=exporter_rules(model)),
        kb.obj("RoleBinding", kb.meta(model, name, EXPORTER), subjects=subject,
               roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}),
        kb.obj("Service", kb.meta(model, name, EXPORTER), spec={
            "type": "ClusterIP", "selector": kb.selector_labels(model, EXPORTER),
            "ports": [{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}]}),
        kb.obj("Deployment", kb.meta(model, name, EXPORTER), spec={
            "replicas": 1, "selector": {"matchLabels": kb.selector_labels(model, EXPORTER)},
            # one exporter at a time: two would double every series for the old one's scrape interval
            "strategy": {"type": "Recreate"},
            "template": kb.template(model, EXPORTER, pod)}),
    ]


def exporter_target(model):
    """The labels Prometheus gives the exporter's target through its ServiceMonitor (the prometheus-operator's job:
    the Service's name; namespace: the Service's): what the exporter-down alert looks for."""
    return {"job": exporter_name(model), "namespace": model.namespace}


def _with_labels(meta, extra):
    meta["labels"] = dict(sorted(dict(extra, **meta["labels"]).items()))
    return meta


def _monitoring(model):
    obs = model.observability
    out = []
    if obs.service_monitor.enabled:
        out.append(kb.obj("ServiceMonitor", _with_labels(kb.meta(model, exporter_name(model), EXPORTER),
                                                         obs.service_monitor.labels), spec={
            "selector": {"matchLabels": kb.selector_labels(model, EXPORTER)},
            "namespaceSelector": {"matchNames": [model.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": obs.service_monitor.interval,
                           "scrapeTimeout": "%ds" % obs.scrape_timeout_seconds}]}))
    if obs.service_monitor.enabled and slurmctld_metrics(model):
        # slurmctld's own endpoints (Slurm 25.11+), on the controller's headless Service
        out.append(kb.obj("ServiceMonitor", _with_labels(kb.meta(model, controller_name(model), kb.CONTROLLER),
                                                         obs.service_monitor.labels), spec={
            "selector": {"matchLabels": kb.selector_labels(model, kb.CONTROLLER)},
            "namespaceSelector": {"matchNames": [model.namespace]},
            "endpoints": [{"port": "slurmctld", "path": path, "interval": obs.service_monitor.interval,
                           "scrapeTimeout": "%ds" % obs.scrape_timeout_seconds}
                          for path in c.SLURMCTLD_METRICS_PATHS]}))
    if obs.prometheus_rule.enabled:
        out.append(kb.obj("PrometheusRule", _with_labels(kb.meta(model, exporter_name(model), EXPORTER),
                                                         obs.prometheus_rule.labels),
                          spec=alerts.rule_groups(exporter_target(model))))
    if obs.dashboards.enabled:
        data = dict((name, dashboards.dashboard_text(board))
                    for name, board in sorted(dashboards.dashboards().items()))
        out.append(kb.obj("ConfigMap", _with_labels(kb.meta(model, "%s-dashboards" % model.name, DASHBOARDS),
                                                    obs.dashboards.labels), data=data))
    return out


def observability_objects(model):
    """The objects of spec.observability (none while the exporter is off: rules and dashboards read its metrics)."""
    if not model.observability.exporter.enabled:
        return []
    return _exporter(model) + _monitoring(model)
