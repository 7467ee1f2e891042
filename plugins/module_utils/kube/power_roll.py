# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes side of upgrading ephemeral workers (the Slurm side: slurm/power_down.py): which of the bare pods
our ResumeProgram made run an older template than their NodeSet's current one. The StatefulSet roll
(kube/rollout.py) does not see them: they are no StatefulSet's pods.

A pod carries the digest of the template it was made from (render/power_kube.py TEMPLATE_ANNOTATION); the current
digests are those of the power ConfigMap this run applies (check mode: would apply). One list of pods per run, by our
labels, and only for a cluster with ephemeral NodeSets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.render.power_kube import (
    EPHEMERAL_LABEL, POWER_CONFIG_FILE, TEMPLATE_ANNOTATION)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import power_name


def current_digests(model, desired):
    """{NodeSet: its pod template's digest} from the power ConfigMap among `desired`; None when there is none (no
    ephemeral NodeSet, or a run that does not apply it)."""
    for obj in desired:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == power_name(model):
            config = json.loads(obj["data"][POWER_CONFIG_FILE])
            return dict((name, node_set["pod"]["metadata"].get("annotations", {}).get(TEMPLATE_ANNOTATION))
                        for name, node_set in config["nodeSets"].items())
    return None


def _annotation(pod):
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_ANNOTATION)


def outdated_pods(client, model, digests):
    """Names (= Slurm nodes) of our live ephemeral pods whose template digest is not their NodeSet's current one.
    A pod being deleted is on its way out already; one of a NodeSet that is no longer ephemeral is left out (its
    node is no CLOUD node any more: not power saving's to take down)."""
    selector = "%s,%s" % (ka.owner_selector(model.name), EPHEMERAL_LABEL)
    stale = []
    for pod in client.list("Pod", model.namespace, selector):
        meta = pod.get("metadata") or {}
        node_set = (meta.get("labels") or {}).get(EPHEMERAL_LABEL)
        if meta.get("deletionTimestamp") or node_set not in digests:
            continue
        if _annotation(pod) != digests[node_set]:
            stale.append(meta["name"])
    return sorted(stale)
