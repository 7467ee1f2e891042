# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A NodeSet's `spec.ephemeral`: workers on demand through Slurm's own power saving (one place for its schema, its
rules across fields and documents, and its model).

An ephemeral NodeSet keeps `minReplicas` workers always up (`<name>-0` .. `<name>-<min-1>`, started like any worker);
its other nodes up to `maxReplicas` are Slurm CLOUD nodes: slurmctld runs our ResumeProgram with the nodes a job was
given, and our SuspendProgram with the nodes idle for `suspendTime` seconds. Slurm reads one SuspendTime,
ResumeTimeout and SuspendTimeout for the cluster (22.05 has no per-node value), so every ephemeral NodeSet of a
cluster must give the same three.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict, List, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import Bool, Int, Node, Obj, SpecIssue

# slurm.conf holds ResumeTimeout and SuspendTimeout in 16 bits; SuspendTime in 32 (a larger one is not "idle").
UINT16_MAX = 65535
MAX_SUSPEND_TIME = 2 ** 31 - 1
# slurmctld looks for idle nodes every power_save_interval (10 s): a shorter SuspendTime would not be kept.
MIN_SUSPEND_TIME = 10
# slurm.conf keys the ephemeral NodeSets set (render/power_save.py): spec.slurmConfig may not set them beside one.
POWER_SAVE_KEYS = ("SuspendProgram", "ResumeProgram", "ResumeFailProgram", "SuspendTime", "ResumeTimeout",
                   "SuspendTimeout", "SuspendExcNodes")
SHARED_TIMES = (("suspendTime", "SuspendTime"), ("resumeTimeout", "ResumeTimeout"),
                ("suspendTimeout", "SuspendTimeout"))


def ephemeral_schema(max_nodes: int) -> Node:
    return Obj("Workers on demand through Slurm's power saving: minReplicas workers always run; a job given "
               "powered-down nodes starts their workers (ResumeProgram), and workers idle for suspendTime seconds "
               "are removed (SuspendProgram). Needs maxReplicas (the most workers); replicas is then Slurm's to "
               "decide: leave it out (or equal to minReplicas).", {
                   "enabled": Bool("Power workers up and down on demand.", default=False),
                   "minReplicas": Int("Workers always up (<name>-0 ..), never powered down.", minimum=0,
                                      maximum=max_nodes, default=0),
                   "suspendTime": Int("Seconds a worker stays idle before Slurm powers it down (SuspendTime; "
                                      "at least %d: slurmctld looks for idle nodes every 10 s). The same in "
                                      "every ephemeral NodeSet of a cluster." % MIN_SUSPEND_TIME,
                                      minimum=MIN_SUSPEND_TIME, maximum=MAX_SUSPEND_TIME, default=300),
                   "resumeTimeout": Int("Seconds from Slurm's resume request to a registered slurmd "
                                        "(ResumeTimeout); a worker not up by then is set DOWN and its job "
                                        "requeued. The same in every ephemeral NodeSet of a cluster.",
                                        minimum=1, maximum=UINT16_MAX, default=300),
                   "suspendTimeout": Int("Seconds Slurm allows a worker to go away before it may be resumed "
                                         "again (SuspendTimeout). The same in every ephemeral NodeSet of a "
                                         "cluster.", minimum=1, maximum=UINT16_MAX, default=90),
               })


_ON = "has(self.ephemeral) && self.ephemeral.enabled"
# The CRD's rules (on the NodeSet spec, where maxReplicas and replicas are); ephemeral_issues() says the same in
# Python with each field's own path.
CEL_RULES = [
    ("!(%s) || has(self.maxReplicas)" % _ON, "an ephemeral NodeSet needs maxReplicas", ".maxReplicas"),
    ("!(%s) || !has(self.maxReplicas) || self.ephemeral.minReplicas < self.maxReplicas" % _ON,
     "ephemeral.minReplicas must be below maxReplicas", ".ephemeral.minReplicas"),
    ("!(%s) || !has(self.replicas) || self.replicas == self.ephemeral.minReplicas" % _ON,
     "an ephemeral NodeSet's replicas is Slurm's to decide: leave it out or equal to ephemeral.minReplicas",
     ".replicas"),
]


def _enabled(spec: Any) -> bool:
    eph = spec.get("ephemeral") if isinstance(spec, dict) else None
    return isinstance(eph, dict) and eph.get("enabled") is True


def ephemeral_issues(cluster_label: str, slurm_config: Any,
                     node_sets: Sequence[Tuple[str, Dict[str, Any]]]) -> List[SpecIssue]:
    """Rules of spec.ephemeral across fields (one NodeSet), across NodeSets (the shared times) and with the
    SlurmCluster's slurmConfig. `node_sets`: (label, validated document) pairs."""
    issues = []
    if isinstance(slurm_config, dict) and any(_enabled(doc.get("spec")) for _l, doc in node_sets
                                              if isinstance(doc, dict)):
        owned = dict((k.lower(), k) for k in POWER_SAVE_KEYS)
        for key in sorted(k for k in slurm_config if isinstance(k, str) and k.lower() in owned):
            issues.append(SpecIssue("%s spec.slurmConfig.%s" % (cluster_label, key),
                                    "is set by the ephemeral NodeSets (spec.ephemeral): Slurm's power saving "
                                    "runs our programs with these"))
    first: Dict[str, Tuple[str, Any]] = {}
    for label, doc in node_sets:
        spec = doc.get("spec") if isinstance(doc, dict) else None
        if not isinstance(spec, dict) or not _enabled(spec):
            continue
        eph = spec["ephemeral"]
        low, high, replicas = eph.get("minReplicas"), spec.get("maxReplicas"), spec.get("replicas")
        if high is None:
            issues.append(SpecIssue("%s spec.maxReplicas" % label,
                                    "is required with ephemeral.enabled: the most workers Slurm may power up"))
        elif isinstance(low, int) and isinstance(high, int) and low >= high:
            issues.append(SpecIssue("%s spec.ephemeral.minReplicas" % label,
                                    "must be below maxReplicas (%d): with %d workers always up nothing is left to "
                                    "power up and down" % (high, low)))
        if replicas is not None and isinstance(low, int) and replicas != low:
            issues.append(SpecIssue("%s spec.replicas" % label,
                                    "an ephemeral NodeSet's running workers are Slurm's to decide: leave replicas "
                                    "out (ephemeral.minReplicas, %d, are always up), got %r" % (low, replicas)))
        for field, key in SHARED_TIMES:
            value = eph.get(field)
            if value is None:
                continue
            if field not in first:
                first[field] = (label, value)
            elif first[field][1] != value:
                issues.append(SpecIssue("%s spec.ephemeral.%s" % (label, field),
                                        "%r differs from %s's %r: Slurm reads one %s for the whole cluster"
                                        % (value, first[field][0], first[field][1], key)))
    return issues


def ephemeral_model(spec: Dict[str, Any]) -> m.Ephemeral:
    eph = spec["ephemeral"]
    return m.Ephemeral(enabled=eph["enabled"], min_replicas=eph["minReplicas"], suspend_time=eph["suspendTime"],
                       resume_timeout=eph["resumeTimeout"], suspend_timeout=eph["suspendTimeout"])


def replicas_of(spec: Dict[str, Any]) -> int:
    """Workers the backends keep running: the given replicas, else 1; an ephemeral NodeSet's floor."""
    if _enabled(spec):
        return spec["ephemeral"]["minReplicas"]
    return spec["replicas"] if spec.get("replicas") is not None else 1
