# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the workers of spec.topology.nodeLabels run: two reads per run, whatever the cluster's size - one list of
the cluster's worker pods (our selector) and one list of the Kubernetes nodes that carry the leaf tier's label (a
label selector) - never one read per pod. The model gets each worker's Placement; spec/topology.py makes the tree
and render/topology_conf.py the files, which reach slurmctld as any changed config does (kube/reconfigure.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import APP_NAME, WORKER
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m


def worker_selector(model):
    return "%s=%s,%s=%s,%s=%s" % (c.LABEL_NAME, APP_NAME, c.LABEL_INSTANCE, model.name, c.LABEL_COMPONENT, WORKER)


def placement(pods, nodes, tiers):
    """Slurm node -> Placement from the worker pods and the Kubernetes nodes read. A pod being deleted, or not
    bound yet, has no place; a node not among `nodes` (it lacks the leaf label, or is gone) has no labels."""
    labels = dict((n["metadata"]["name"], (n["metadata"].get("labels") or {})) for n in nodes)
    out = {}
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        host = (pod.get("spec") or {}).get("nodeName") or None
        own = labels.get(host, {}) if host else {}
        out[meta["name"]] = m.Placement(host, dict((k, own[k]) for k in tiers if k in own))
    return out


def with_placement(client, model):
    """The model with the placement of its workers read from the API server; unchanged without nodeLabels."""
    node_labels = model.topology.node_labels
    if node_labels is None:
        return model
    pods = client.list("Pod", model.namespace, worker_selector(model))
    nodes = client.list("Node", None, node_labels.tiers[-1])
    placed = dataclasses.replace(node_labels, placement=placement(pods, nodes, node_labels.tiers))
    return dataclasses.replace(model, topology=dataclasses.replace(model.topology, node_labels=placed))
