# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster's `spec.containers`: Slurm's native OCI container support (`srun --container=BUNDLE`), one place
for its schema and its model; render/oci_conf.py writes oci.conf from the model.

Slurm runs a step's container through an OCI runtime that oci.conf names, unprivileged ("rootless"), from a bundle
already on the node (node/oci_bundle.py makes one in the jail). We render for the runtimes Debian ships, runc and
crun, the way Slurm's containers.html gives them: one RunTimeRun (create/start in one call), and RunTimeQuery,
RunTimeKill and RunTimeDelete, each with the runtime's state in `stateDir`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import Bool, Node, Obj, Str

RUNTIMES = ("runc", "crun")
# a path of one token: oci.conf's values are run through a shell-like split by slurmstepd, and what reads back
# exactly (config_syntax) has no quotes, '#' or backslashes
STATE_DIR_PATTERN = r"^/[A-Za-z0-9_./%-]*$"


def containers_schema() -> Node:
    return Obj("Container jobs through Slurm's native OCI support: `srun --container=BUNDLE` runs a step in an OCI "
               "runtime bundle already on the node (make one in the jail with oci_bundle.py). oci.conf is written "
               "for the runtime; the workers' image must have it installed.", {
                   "enabled": Bool("Write oci.conf, so that steps may ask for a container.", default=False),
                   "runtime": Str("The OCI runtime (Debian's package of that name), run rootless as the job's user.",
                                  enum=list(RUNTIMES), default="runc"),
                   "stateDir": Str("Where the runtime keeps its containers' state on the node (its --root); each "
                                   "container's name holds the node, user, job, step and task, so they never clash. "
                                   "Slurm's %-patterns (%U: the user's id) may be used.",
                                   pattern=STATE_DIR_PATTERN,
                                   pattern_help="an absolute path of letters, digits and _ . / % -",
                                   max_length=255, default="/tmp"),
               })


def containers_model(containers: Dict[str, Any]) -> m.Containers:
    return m.Containers(enabled=containers["enabled"], runtime=containers["runtime"],
                        state_dir=containers["stateDir"])
