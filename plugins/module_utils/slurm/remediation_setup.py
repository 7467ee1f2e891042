# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurm_remediate's wiring: the runner, checker, replacer, event recorder and record store of a remediation pass
for its target (a local cluster, or Kubernetes with either Slurm transport), the options that override the spec's
remediation settings, and the result with its diff. The pass itself is slurm/remediation.py, the record it leaves
for the exporter observe/remediation_record.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.args import auth_params, runner_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.pod_replace import KubeReplacer
from ansible_collections.soperator.slurm.plugins.module_utils.kube import topology as kube_topology
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import remediation as rm
from ansible_collections.soperator.slurm.plugins.module_utils.observe import remediation_record as rr
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import (
    REMEDIATION, labels as component_labels)
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

# The field manager of the remediation record's key (the reconcile's is constants.FIELD_MANAGER).
RECORD_FIELD_MANAGER = c.FIELD_MANAGER + "-remediation"


class RemediationFailed(SoperatorError):
    """The pass could not run (or stopped); `result` is what the module reports with the failure."""

    def __init__(self, msg, result):
        super(RemediationFailed, self).__init__(msg)
        self.result = result


def setting(params, option, default):
    """The option when given, else the spec's value."""
    return default if params.get(option) is None else params[option]


def local_parts(params, model):
    from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
    from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import default_state_dir
    state_dir = params["state_dir"] or default_state_dir(model.name)
    cluster = lb.LocalCluster(state_dir, model)
    slurm_conf = cluster.env()["SLURM_CONF"]
    if not os.path.exists(slurm_conf):
        raise SlurmError("no local cluster in %s (no %s): start it first" % (state_dir, slurm_conf))
    runner = runner_from_params(dict(transport="local", slurm_conf=slurm_conf))
    program = params["health_check_program"] or os.path.join(cluster.state_dir, "bin", "health-check")
    checker = rm.LocalChecker(program, slurm_conf=slurm_conf, timeout=params["check_timeout"])
    store = rr.FileStore(os.path.join(cluster.layout.status, rr.RECORD_KEY))
    # no Kubernetes nodes: no topology follows the pods (spec.topology.nodeLabels is for Kubernetes)
    return runner, checker, rm.LocalReplacer(cluster), None, store, None


class ConfigMapStore(object):
    """The record as the key remediation.json of the ConfigMap <name>-remediation-status: read with the list the
    remediation's Role allows (by our labels), written with server-side apply under RECORD_FIELD_MANAGER."""

    def __init__(self, client, model):
        self.client = client
        self.model = model
        self.name = names.remediation_status_name(model)

    def load(self):
        from ansible_collections.soperator.slurm.plugins.module_utils.kube.apply import owner_selector
        selector = "%s,%s=%s" % (owner_selector(self.model.name), c.LABEL_COMPONENT, REMEDIATION)
        for item in self.client.list("ConfigMap", self.model.namespace, label_selector=selector):
            if item.get("metadata", {}).get("name") == self.name:
                return rr.parse((item.get("data") or {}).get(rr.RECORD_KEY))
        return None

    def save(self, record):
        self.client.apply({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": self.name, "namespace": self.model.namespace,
                                        "labels": component_labels(self.model, REMEDIATION)},
                           "data": {rr.RECORD_KEY: rr.dumps(record)}},
                          force=True, field_manager=RECORD_FIELD_MANAGER)


def kube_checker(params, client, namespace, timeout=60):
    """The health checker of a cluster on Kubernetes: the program in the worker pod (slurm_transport=kubernetes), or
    on this host in the node's environment (slurm_transport=local). Remediation and the rolling upgrade share it."""
    program = params.get("health_check_program") or c.HEALTH_CHECK_PROGRAM
    if params["slurm_transport"] == "local":
        return rm.LocalChecker(program, slurm_conf=params.get("slurm_conf"), timeout=timeout)

    def core_v1():
        from kubernetes.client import CoreV1Api
        return CoreV1Api(client.api)
    return rm.KubeChecker(namespace, core_v1, program=program, timeout=timeout)


def kube_parts(params, model):
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import module as km
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import CR_API_VERSION
    client = km.make_client(params)
    runner = runner_from_params(dict(auth_params(params), transport=params["slurm_transport"],
                                     namespace=model.namespace, cluster_name=model.name,
                                     slurm_conf=params.get("slurm_conf")))
    checker = kube_checker(params, client, model.namespace, params["check_timeout"])
    replacer = KubeReplacer(
        client, model.namespace,
        cordon=setting(params, "cordon_kubernetes_node", model.remediation.cordon_kubernetes_node),
        timeout=params["register_timeout"], poll=params["wait_sleep"])
    events = rm.EventRecorder(client, model.namespace, model.name, CR_API_VERSION) if params["events"] else None
    topology = kube_topology.follower(client, model, runner, timeout=params["register_timeout"],
                                      poll=params["wait_sleep"])
    return runner, checker, replacer, events, ConfigMapStore(client, model), topology


def record(store, result, success=None, clock=time.time):
    """Add the pass to the remediation record. -> None, or why it could not be written (the caller reports it as an
    error: a remediation that cannot say what it did fails loudly)."""
    try:
        store.save(rr.updated(store.load(), result, clock(), success=success))
    except (OSError, KubeError) as e:
        return "could not write the remediation record: %s" % e
    return None


def remediate(params, model, check_mode=False):
    """One pass over the cluster of `model` with the module's options: -> the module result (its `errors` list the
    nodes whose remediation failed). Raises RemediationFailed with the queries made when the pass cannot run."""
    result = {"changed": False, "nodes": [], "errors": [], "events": [], "queries": [], "actions": {}}
    runner = store = None
    try:
        parts = local_parts if params["target"] == "local" else kube_parts
        runner, checker, replacer, events, store, topology = parts(params, model)
        if not setting(params, "replace_drained_nodes", model.remediation.replace_drained_nodes):
            replacer = None
        remediator = rm.Remediator(
            runner, setting(params, "reason_prefix", model.remediation.drain_reason_prefix), checker,
            replacer=replacer, events=events, check_mode=check_mode,
            register_timeout=params["register_timeout"], poll=params["wait_sleep"], topology=topology)
        result.update(remediator.run())
    except (SlurmError, rm.RemediationError, KubeError) as e:
        result["queries"] = runner.commands if runner is not None else []
        problem = record(store, result, success=False) if store is not None and not check_mode else None
        raise RemediationFailed(str(e) + ("; " + problem if problem else ""), result)
    result["queries"] = runner.commands
    if not check_mode:
        problem = record(store, result)
        if problem:
            result["errors"].append(problem)
    return result


def diff(nodes):
    """Node states before and after (in check mode: as predicted), for the nodes this pass acted on."""
    before, after = [], []
    for node in nodes:
        if rm.REPLACED not in node["steps"] and rm.RESUMED not in node["steps"]:
            continue
        before.append("%s: %s (%s)\n" % (node["name"], node["state"], node["reason"]))
        if rm.RESUMED in node["steps"]:
            after.append("%s: resumed\n" % node["name"])
        else:
            after.append("%s: replaced, %s (%s)\n" % (node["name"], node["state"], node["reason"]))
    return {"before": "".join(before), "after": "".join(after), "before_header": "slurm nodes",
            "after_header": "slurm nodes"}
