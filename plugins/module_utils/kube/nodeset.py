# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurm_nodeset: one NodeSet of a SlurmCluster on Kubernetes. The model is the live SlurmCluster and its other
NodeSets (kube/live.py) plus this NodeSet as given (or as it is, for state=absent and a replicas-only change), so
slurm.conf always lists every NodeSet; KubeCluster applies only this NodeSet's objects and the cluster-wide ones that
name its nodes, and prunes only this NodeSet's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
from collections import namedtuple

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import live
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from


class NodeSetError(SoperatorError):
    """The options do not name one NodeSet we can manage (the module fails with this message)."""


# client, model; current: the live NodeSet or None; affected / ours: the desired and prune filters of KubeCluster.
# present; summary: the module's `node_set` result.
NodeSetChange = namedtuple("NodeSetChange", "client model name current affected ours summary")


def definition_from(src, definition):
    """The NodeSet document of `src` / `definition` (a copy), or None when neither is given."""
    if not src and definition is None:
        return None
    try:
        docs = documents_from(src, definition)
    except (IOError, OSError) as e:
        raise NodeSetError("cannot read src %s: %s" % (src, e))
    except SpecError as e:
        raise NodeSetError(str(e))
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "NodeSet":
        raise NodeSetError("definition/src must hold exactly one NodeSet document")
    return copy.deepcopy(docs[0])


def identity(params, definition):
    """(name, namespace, cluster_name) from the options, else from the definition; options that contradict it fail."""
    meta = (definition or {}).get("metadata") or {}
    name = params["name"] or meta.get("name")
    namespace = params["namespace"] or meta.get("namespace")
    cluster = params["cluster_name"] or ((definition or {}).get("spec") or {}).get("clusterName")
    missing = [what for what, value in (("name", name), ("namespace", namespace), ("cluster_name", cluster))
               if not value]
    if missing:
        raise NodeSetError("missing %s: give the option(s) or a definition that has them" % ", ".join(missing))
    if definition is not None:
        for what, given, found in (("name", params["name"], meta.get("name")),
                                   ("namespace", params["namespace"], meta.get("namespace"))):
            if given and found and given != found:
                raise NodeSetError("%s %r differs from the definition's %r" % (what, given, found))
    return name, namespace, cluster


def model_for(client, params, name, namespace, cluster_name, definition):
    """(ClusterModel, the live NodeSet or None). Raises SpecError for a spec that does not validate."""
    cluster, node_sets = live.read_cluster(client, cluster_name, namespace)
    if cluster is None:
        raise NodeSetError("SlurmCluster %s/%s does not exist: deploy it with soperator.slurm.slurm_cluster first"
                           % (namespace, cluster_name))
    current = None
    docs = [live.spec_document(cluster)]
    for obj in node_sets:
        if obj["metadata"]["name"] == name:
            current = obj
        else:
            docs.append(live.spec_document(obj))
    if params["state"] == "present":
        mine = definition if definition is not None else (live.spec_document(current) if current else None)
        if mine is None:
            raise NodeSetError("NodeSet %s/%s does not exist: give its definition (or src) to create it"
                               % (namespace, name))
        mine.setdefault("metadata", {}).setdefault("namespace", namespace)
        mine["metadata"]["name"] = name
        mine.setdefault("spec", {})["clusterName"] = cluster_name
        if params["replicas"] is not None:
            mine["spec"]["replicas"] = params["replicas"]
        docs.append(mine)
    return build_model(docs), current


def filters(model, name):
    """(affected, ours): this NodeSet's objects plus the cluster-wide ones that name its nodes (the Slurm configs
    ConfigMap, the controller StatefulSet); and this NodeSet's objects, the only ones pruned."""
    slurm_configs = names.slurm_configs_name(model)
    controller = names.controller_name(model)

    def ours(obj):
        meta = obj.get("metadata") or {}
        return (meta.get("labels") or {}).get(c.LABEL_NODESET) == name or \
            (obj.get("kind") == "NodeSet" and meta.get("name") == name)

    def affected(obj):
        kind, obj_name = obj.get("kind"), (obj.get("metadata") or {}).get("name")
        return ours(obj) or (kind, obj_name) in (("ConfigMap", slurm_configs), ("StatefulSet", controller))

    return affected, ours


def prepare(params, make_client):
    """Everything slurm_nodeset needs before KubeCluster runs, checked in this order: replicas, the definition, the
    NodeSet's identity, then the API (make_client(params), the live cluster). Raises NodeSetError, SpecError (the
    model) or the client's KubeError."""
    if params["replicas"] is not None and params["replicas"] < 0:
        raise NodeSetError("replicas must be >= 0, got %d" % params["replicas"])
    definition = definition_from(params["src"], params["definition"])
    name, namespace, cluster_name = identity(params, definition)
    client = make_client(params)
    model, current = model_for(client, params, name, namespace, cluster_name, definition)
    affected, ours = filters(model, name)
    if params["state"] == "present":
        node_set = model.node_set(name)
        summary = {"name": node_set.name, "replicas": node_set.replicas, "max_replicas": node_set.max_replicas,
                   "nodes": node_set.node_range}
    else:
        summary = {"name": name, "replicas": 0, "max_replicas": 0, "nodes": None}
    return NodeSetChange(client, model, name, current, affected, ours, summary)
