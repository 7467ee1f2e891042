# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurm.conf's power saving: what ephemeral NodeSets (spec/ephemeral.py) add to it.

Their nodes above minReplicas are `State=CLOUD`: slurmctld starts with them powered down, runs ResumeProgram with the
nodes a job was given and SuspendProgram with the nodes idle for SuspendTime. Every other node (fixed NodeSets, the
ephemeral floors) is in SuspendExcNodes: power saving never touches it. A cluster without an ephemeral NodeSet gets
none of these keys (its slurm.conf is unchanged).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import SlurmTarget
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import ClusterModel, NodeSet

# Comma-separated slurm.conf values we add our words to (a user's own words stay): cloud_dns (pods and local
# slurmds are reached by name or by NodeAddr from slurm.conf, not by an address a ResumeProgram would set),
# idle_on_node_suspend (a node powered down while DOWN or DRAINED comes back usable: its worker is a new one);
# PrivateData=cloud (without it sinfo and scontrol hide powered-down nodes).
MERGED_WORDS = (("SlurmctldParameters", ("cloud_dns", "idle_on_node_suspend")), ("PrivateData", ("cloud",)))


def ephemeral_node_sets(model: ClusterModel) -> List[NodeSet]:
    return [ns for ns in parts.defined_node_sets(model) if ns.cloud_range]


def node_ranges(node_set: NodeSet) -> List[Tuple[str, str, int, int]]:
    """(hostlist, State, first ordinal, end) of each NodeName line of a NodeSet: FUTURE nodes the backends start, and
    an ephemeral NodeSet's CLOUD nodes."""
    first, out = node_set.first_cloud_ordinal, []
    if node_set.static_range:
        out.append((node_set.static_range, "FUTURE", 0, first))
    if node_set.cloud_range:
        out.append((node_set.cloud_range, "CLOUD", first, node_set.max_replicas))
    return out


def power_save_settings(model: ClusterModel, target: SlurmTarget) -> List[Tuple[str, Any, Optional[str]]]:
    """The power saving lines of slurm.conf (empty without an ephemeral NodeSet)."""
    ephemeral = ephemeral_node_sets(model)
    if not ephemeral:
        return []
    times = ephemeral[0].ephemeral          # the same in every ephemeral NodeSet (spec/ephemeral.py)
    static = [ns.static_range for ns in parts.defined_node_sets(model) if ns.static_range]
    settings: List[Tuple[str, Any, Optional[str]]] = [
        ("ResumeProgram", target.resume_program,
         "Ephemeral NodeSets (%s): slurmctld runs these with the nodes to start or remove."
         % ", ".join(ns.name for ns in ephemeral)),
        ("SuspendProgram", target.suspend_program, None),
        ("ResumeFailProgram", target.resume_fail_program,
         "Nodes not up within ResumeTimeout: Slurm sets them DOWN and requeues their jobs; this removes what "
         "was started."),
        ("SuspendTime", times.suspend_time, None),
        ("ResumeTimeout", times.resume_timeout, None),
        ("SuspendTimeout", times.suspend_timeout, None),
    ]
    if static:
        settings.append(("SuspendExcNodes", ",".join(static),
                         "Workers of fixed NodeSets and the ephemeral floors (minReplicas) are never powered down."))
    settings += [(key, ",".join(words), None) for key, words in MERGED_WORDS]
    return settings


def merged_overrides(model: ClusterModel, overrides: Dict[str, Any]) -> Dict[str, Any]:
    """spec.slurmConfig with our words added to the user's SlurmctldParameters and PrivateData (their spelling kept)
    when an ephemeral NodeSet needs them."""
    if not ephemeral_node_sets(model):
        return overrides
    out = dict(overrides)
    for key, words in MERGED_WORDS:
        for user_key in [k for k in overrides if k.lower() == key.lower()]:
            out[user_key] = parts.merged_words(overrides[user_key], words)
    return out
