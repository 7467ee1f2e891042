# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster and NodeSet CustomResourceDefinitions, generated from the same schema spec/validate.py validates
with.

`crds/*.yaml` in the collection are these objects written out (tests keep them in sync).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict, List

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import CLUSTER_SPEC, NODESET_SPEC

VERSION = "v1alpha1"

_CONDITIONS = {
    "type": "array",
    "description": "Latest observations of the object's state, one per type.",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "description": "Condition type, e.g. Ready or ControllerReady."},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "description": "One-word CamelCase reason."},
            "message": {"type": "string", "description": "Human-readable details."},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    },
}

_CLUSTER_STATUS = {
    "type": "object",
    "description": "Written by soperator.slurm after each apply.",
    "properties": {
        "phase": {"type": "string", "enum": ["Pending", "Provisioning", "Ready", "Degraded", "Failed"]},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "conditions": _CONDITIONS,
        "controllerEndpoint": {"type": "string"},
        "loginEndpoint": {"type": "string"},
        "slurmConfigDigest": {
            "type": "string",
            "description": "SHA-256 over the Slurm configs ConfigMap that slurmctld is known to have loaded (after a "
                           "reconfigure, or a start with them); a different rendered digest makes the next apply "
                           "reconfigure.",
        },
        "jail": {
            "type": "object",
            "description": "The jail's sentinel as jail_populate last read it: what populated the jail and when.",
            "properties": dict((key, {"type": "string"}) for key in (
                "populatedAt", "source", "sourceType", "digest", "tag", "overwrite", "populatedBy", "job")),
        },
    },
}

_NODESET_STATUS = {
    "type": "object",
    "description": "Written by soperator.slurm after each apply.",
    "properties": {
        "phase": {"type": "string", "enum": ["Pending", "Provisioning", "Ready", "Scaling", "Degraded", "Failed"]},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "replicas": {"type": "integer", "format": "int32", "description": "Workers that exist."},
        "readyReplicas": {"type": "integer", "format": "int32", "description": "Workers that are ready."},
        "selector": {"type": "string", "description": "Label selector of the workers (for the scale subresource)."},
        "conditions": _CONDITIONS,
    },
}


def _column(name, path, kind="string", description=None, priority=None):
    col = {"name": name, "type": kind, "jsonPath": path}
    if description:
        col["description"] = description
    if priority is not None:
        col["priority"] = priority
    return col


def _crd(kind, plural, short_names, spec_schema, status_schema, columns, subresources):
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "%s.%s" % (plural, m.API_GROUP),
            "labels": {"app.kubernetes.io/managed-by": m.MANAGED_BY, "app.kubernetes.io/name": "slurm"},
        },
        "spec": {
            "group": m.API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": kind + "List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": list(short_names),
                "categories": ["slurm"],
            },
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "additionalPrinterColumns": columns,
                "subresources": subresources,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": spec_schema.description,
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema.openapi(),
                        "status": status_schema,
                    },
                }},
            }],
        },
    }


def slurm_cluster_crd() -> Dict[str, Any]:
    return _crd("SlurmCluster", "slurmclusters", ["slurm"], CLUSTER_SPEC, _CLUSTER_STATUS, [
        _column("Phase", ".status.phase"),
        _column("Login", ".spec.login.replicas", "integer", "Login pods."),
        _column("Accounting", ".spec.accounting.enabled", "boolean"),
        _column("Age", ".metadata.creationTimestamp", "date"),
    ], {"status": {}})


def node_set_crd() -> Dict[str, Any]:
    return _crd("NodeSet", "nodesets", ["slurmnodeset"], NODESET_SPEC, _NODESET_STATUS, [
        _column("Cluster", ".spec.clusterName"),
        _column("Replicas", ".spec.replicas", "integer", "Desired workers."),
        _column("Ready", ".status.readyReplicas", "integer", "Ready workers."),
        _column("Max", ".spec.maxReplicas", "integer", "Nodes defined in slurm.conf.", priority=1),
        _column("Phase", ".status.phase"),
        _column("Age", ".metadata.creationTimestamp", "date"),
    ], {
        "status": {},
        # `kubectl scale nodeset gpu --replicas=8` works like for a Deployment.
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    })


def crds() -> List[Dict[str, Any]]:
    """Both CRDs, in apply order."""
    return [slurm_cluster_crd(), node_set_crd()]
