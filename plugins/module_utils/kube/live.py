# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of live custom resources: a SlurmCluster and its NodeSets as they are in Kubernetes, turned back
into the spec documents a user writes. slurm_cluster_info returns them; slurm_nodeset and jail_populate build the
ClusterModel from them.

A spec document keeps what the user wrote: apiVersion, kind, name, namespace, the user's labels and annotations, and
the spec. Server bookkeeping (uid, resourceVersion, managedFields, status), the labels we add to every object, our
applied-digest annotation and kubectl's annotations are left out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube.apply import APPLIED_ANNOTATION
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import check_bounds

# The labels slurm_cluster / slurm_nodeset put on the custom resources (kube_objects.component_labels).
OUR_LABELS = (c.LABEL_MANAGED_BY, c.LABEL_INSTANCE, c.LABEL_COMPONENT, c.LABEL_NAME, c.LABEL_NODESET)
_KUBECTL_ANNOTATIONS = "kubectl.kubernetes.io/"


def _user_annotation(key):
    return key != APPLIED_ANNOTATION and not key.startswith(_KUBECTL_ANNOTATIONS)


def spec_document(obj):
    """A live SlurmCluster or NodeSet as a spec document (a new dict: changing it leaves `obj` alone)."""
    meta = obj.get("metadata") or {}
    out_meta = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    labels = dict((k, v) for k, v in (meta.get("labels") or {}).items() if k not in OUR_LABELS)
    if labels:
        out_meta["labels"] = labels
    annotations = dict((k, v) for k, v in (meta.get("annotations") or {}).items() if _user_annotation(k))
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": out_meta,
            "spec": copy.deepcopy(obj.get("spec") or {})}


def read_cluster(client, name, namespace):
    """(the live SlurmCluster `name` or None, its live NodeSets in the order the API lists them). Two requests: a get
    and a namespaced list; a NodeSet is the cluster's when its spec.clusterName is `name`."""
    cluster = client.get("SlurmCluster", name, namespace)
    if cluster is None:
        return None, []
    node_sets = [obj for obj in client.list("NodeSet", namespace)
                 if (obj.get("spec") or {}).get("clusterName") == name]
    return cluster, node_sets


def cluster_documents(client, name, namespace):
    """The spec documents of the SlurmCluster `name` and its NodeSets, or None when the SlurmCluster does not exist.
    SpecError when one nests or expands beyond what a spec from a file may (documents.check_bounds)."""
    cluster, node_sets = read_cluster(client, name, namespace)
    if cluster is None:
        return None
    documents = [spec_document(cluster)] + [spec_document(obj) for obj in node_sets]
    check_bounds(documents)
    return documents
