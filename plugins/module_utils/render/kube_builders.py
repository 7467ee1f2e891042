# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The building blocks of our Kubernetes objects, shared by every renderer of them (kube_objects.py: the cluster's
objects, observe_objects.py: the exporter and its monitoring objects): the component names and labels, metadata,
pod specs, containers, volumes, StatefulSets, Services. Pure: no I/O, deterministic output."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import MANAGED_BY
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (
    controller_name, jail_claim_name, service_account_name, slurm_configs_name, munge_secret_name)

APP_NAME = "slurm"

CONTROLLER = "controller"
LOGIN = "login"
WORKER = "worker"
ACCOUNTING = "accounting"
ACCOUNTING_DB = "accounting-db"
JAIL = "jail"
CONFIG = "config"
REMEDIATION = "remediation"
CHECKS = "checks"

_API = {
    "ServiceAccount": "v1", "Secret": "v1", "ConfigMap": "v1", "PersistentVolumeClaim": "v1", "Service": "v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Job": "batch/v1", "CronJob": "batch/v1", "StatefulSet": "apps/v1", "PodDisruptionBudget": "policy/v1",
    "Deployment": "apps/v1", "ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
}
# Apply order: what a pod mounts or runs as exists before the pod; the jail is populated before it is used.
KIND_ORDER = ("ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Secret", "ConfigMap",
              "PersistentVolumeClaim", "Service", "Job", "StatefulSet", "PodDisruptionBudget", "CronJob",
              "Deployment", "ServiceMonitor", "PrometheusRule")


# --- metadata ----------------------------------------------------------------------------------------------------

def selector_labels(model, component, node_set=None):
    labels = {c.LABEL_NAME: APP_NAME, c.LABEL_INSTANCE: model.name, c.LABEL_COMPONENT: component}
    if node_set is not None:
        labels[c.LABEL_NODESET] = node_set
    return labels


def labels(model, component, node_set=None):
    result = selector_labels(model, component, node_set)
    result[c.LABEL_MANAGED_BY] = MANAGED_BY
    return result


def meta(model, name, component, node_set=None, annotations=None, namespaced=True):
    meta = {"name": name}
    if namespaced:
        meta["namespace"] = model.namespace
    meta["labels"] = labels(model, component, node_set)
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return meta


def obj(kind, meta, **body):
    obj = {"apiVersion": _API[kind], "kind": kind, "metadata": meta}
    obj.update(body)
    return obj


# --- pod building blocks -----------------------------------------------------------------------------------------

def _dns_searches(model):
    return ["%s.%s.svc.%s" % (model.worker_service, model.namespace, model.cluster_domain),
            "%s.%s.svc.%s" % (controller_name(model), model.namespace, model.cluster_domain)]


def _toleration(t):
    out = {}
    for key, value in (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect),
                       ("tolerationSeconds", t.toleration_seconds)):
        if value is not None:
            out[key] = value
    return out


def pod_spec(model, component, containers, volumes, scheduling=None, api_access=False, **extra):
    spec = {
        "serviceAccountName": service_account_name(model, component),
        "automountServiceAccountToken": api_access,
        # No Service environment variables: they would leak into every job and grow with the namespace.
        "enableServiceLinks": False,
        "dnsConfig": {"searches": _dns_searches(model)},
    }
    spec.update(extra)
    if model.images.pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in model.images.pull_secrets]
    if scheduling is not None:
        if scheduling.node_selector:
            spec["nodeSelector"] = dict(sorted(scheduling.node_selector.items()))
        if scheduling.tolerations:
            spec["tolerations"] = [_toleration(t) for t in scheduling.tolerations]
        if scheduling.affinity:
            spec["affinity"] = copy.deepcopy(scheduling.affinity)
        if scheduling.priority_class_name:
            spec["priorityClassName"] = scheduling.priority_class_name
        if scheduling.runtime_class_name:
            spec["runtimeClassName"] = scheduling.runtime_class_name
    spec["containers"] = containers
    if volumes:
        spec["volumes"] = volumes
    return spec


def template(model, component, pod_spec, node_set=None, annotations=None):
    meta = {"labels": labels(model, component, node_set)}
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return {"metadata": meta, "spec": pod_spec}


def tcp_probe(port, liveness=False):
    probe = {"tcpSocket": {"port": port}, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3}
    if liveness:
        probe.update({"initialDelaySeconds": 30, "periodSeconds": 20, "failureThreshold": 6})
    return probe


def container(model, name, image, ports=(), args=None, command=None, env=None, mounts=None, resources=None,
              security=None, probe_port=None, liveness=True):
    container = {"name": name, "image": image, "imagePullPolicy": model.images.pull_policy}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = env
    if ports:
        container["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports]
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    if probe_port is not None:
        container["readinessProbe"] = tcp_probe(probe_port)
        if liveness:
            container["livenessProbe"] = tcp_probe(probe_port, liveness=True)
    if security:
        container["securityContext"] = security
    return container


def requests_with_memory_limit(resources):
    """Requests as given; memory is also the limit (no CPU limit: throttling a daemon helps nobody)."""
    if not resources:
        return None
    out = {"requests": dict(sorted(resources.items()))}
    if "memory" in resources:
        out["limits"] = {"memory": resources["memory"]}
    return out


def mount(name, path, read_only=False):
    mount = {"name": name, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    return mount


def configs_volume(model):
    return {"name": "slurm-configs", "configMap": {"name": slurm_configs_name(model)}}


def munge_volume(model):
    return {"name": "munge-key", "secret": {"secretName": munge_secret_name(model), "defaultMode": 0o400,
                                            "items": [{"key": s.MUNGE_KEY, "path": s.MUNGE_KEY}]}}


def jail_volume(model):
    return {"name": "jail", "persistentVolumeClaim": {"claimName": jail_claim_name(model)}}


def slurm_volumes(model):
    """(volumes, mounts) every Slurm daemon pod but slurmdbd has: configs, munge key."""
    volumes = [configs_volume(model), munge_volume(model)]
    mounts = [mount("slurm-configs", c.SLURM_CONF_DIR, True), mount("munge-key", c.MUNGE_KEY_DIR, True)]
    return volumes, mounts


def env_secret(name, secret, key):
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def claim_template(model, name, component, size, storage_class):
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    # No managed-by label: the claims it creates outlive the StatefulSet and must never be pruned.
    return {"metadata": {"name": name, "labels": selector_labels(model, component)}, "spec": spec}


def stateful_set(model, name, component, service, replicas, pod_spec, node_set=None, claims=None,
                 on_delete=False, parallel=False, pod_annotations=None):
    spec = {
        "replicas": replicas,
        "serviceName": service,
        "selector": {"matchLabels": selector_labels(model, component, node_set)},
    }
    if parallel:
        spec["podManagementPolicy"] = "Parallel"
    spec["updateStrategy"] = {"type": "OnDelete"} if on_delete else {"type": "RollingUpdate"}
    spec["template"] = template(model, component, pod_spec, node_set, pod_annotations)
    if claims:
        spec["volumeClaimTemplates"] = claims
    return obj("StatefulSet", meta(model, name, component, node_set), spec=spec)


def headless_service(model, name, component, ports, publish_not_ready=True):
    spec = {
        "clusterIP": "None",
        # Slurm daemons resolve each other while starting, before their readiness probes pass.
        "publishNotReadyAddresses": publish_not_ready,
        "selector": selector_labels(model, component),
        "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ports],
    }
    return obj("Service", meta(model, name, component), spec=spec)


def pdb(model, name, component, max_unavailable, node_set=None):
    return obj("PodDisruptionBudget", meta(model, name, component, node_set), spec={
        "maxUnavailable": max_unavailable,
        "selector": {"matchLabels": selector_labels(model, component, node_set)},
    })
