# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The .status the backend writes on the SlurmCluster and its NodeSets: conditions from the workloads' readiness,
transition times kept while a condition does not change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import job_failed, workload_state
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import (
    WORKER, labels as component_labels)
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names


def _condition(ctype, ok, message, generation):
    return {"type": ctype, "status": "True" if ok else "False", "reason": "Ready" if ok else "NotReady",
            "message": message, "observedGeneration": generation}


def cluster_status(model, workloads, generation, previous):
    """The SlurmCluster .status from the live StatefulSets and Jobs (name -> object)."""
    parts = [("ControllerReady", [names.controller_name(model)]),
             ("LoginReady", [names.login_name(model)]),
             ("WorkersReady", [ns.name for ns in model.node_sets])]
    if model.accounting.enabled:
        parts.append(("AccountingReady", [names.accounting_name(model)] + (
            [names.accounting_db_name(model)] if model.accounting.in_cluster is not None else [])))
    conditions = []
    jail = workloads.get(("Job", names.populate_jail_name(model)))
    jail_ok, jail_text = workload_state(jail) if jail else (False, "not created")
    conditions.append(_condition("JailPopulated", jail_ok, "%s: %s" % (names.populate_jail_name(model), jail_text),
                                 generation))
    for ctype, members in parts:
        texts, ok = [], True
        for name in members:
            obj = workloads.get(("StatefulSet", name))
            ready, text = workload_state(obj) if obj else (False, "missing")
            ok = ok and ready
            texts.append("%s %s" % (name, text))
        conditions.append(_condition(ctype, ok, ", ".join(texts) or "none", generation))
    all_ok = all(cond["status"] == "True" for cond in conditions)
    if jail is not None and job_failed(jail):
        phase = "Failed"
    elif all_ok:
        phase = "Ready"
    elif (previous or {}).get("phase") in ("Ready", "Degraded"):
        phase = "Degraded"
    else:
        phase = "Provisioning"
    conditions.insert(0, _condition("Ready", all_ok, "phase %s" % phase, generation))
    return {"phase": phase, "observedGeneration": generation, "conditions": _keep_times(conditions, previous),
            # with a backup: both controllers, in SlurmctldHost order (a client tries them in turn, as slurmd does)
            "controllerEndpoint": ",".join("%s:%d" % (model.dns_name(host, names.controller_name(model)),
                                                      model.controller.port) for host in model.controller_hosts),
            "loginEndpoint": "%s.%s.svc.%s:22" % (names.login_name(model), model.namespace, model.cluster_domain)}


def node_set_status(model, node_set, sts, generation, previous):
    ready, text = workload_state(sts) if sts else (False, "missing")
    status = (sts or {}).get("status") or {}
    selector = ",".join("%s=%s" % kv for kv in sorted(component_labels(model, WORKER, node_set.name).items())
                        if kv[0] != c.LABEL_MANAGED_BY)
    phase = "Ready" if ready else ("Scaling" if sts and int(status.get("replicas") or 0) != node_set.replicas
                                   else "Provisioning")
    return {"phase": phase, "observedGeneration": generation, "replicas": int(status.get("replicas") or 0),
            "readyReplicas": int(status.get("readyReplicas") or 0), "selector": selector,
            "conditions": _keep_times([_condition("Ready", ready, "StatefulSet %s: %s" % (node_set.name, text),
                                                  generation)], previous)}


def _keep_times(conditions, previous):
    """lastTransitionTime moves only when a condition's status changes (so an unchanged status is not rewritten)."""
    before = dict((cond.get("type"), cond) for cond in (previous or {}).get("conditions") or [])
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for cond in conditions:
        old = before.get(cond["type"])
        cond["lastTransitionTime"] = old["lastTransitionTime"] if old and old.get("status") == cond["status"] and \
            old.get("lastTransitionTime") else now
    return conditions
