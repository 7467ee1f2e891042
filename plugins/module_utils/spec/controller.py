# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster's `spec.controller.replicas` and the controller spool's access modes: slurmctld high
availability (one place for their schema, their rule across fields and the failover timers).

`replicas: 2` runs a primary and a backup slurmctld: slurm.conf lists both `SlurmctldHost` lines, primary first. Slurm
needs both to read and write the same StateSaveLocation (a controller started without that state cancels the jobs),
so the spool must be one claim both pods mount: `spool.accessModes` must hold ReadWriteMany.

Failover timers (slurm.conf; src/slurmctld/backup.c of 22.05): the backup pings the primary every SlurmctldTimeout/3
seconds and takes control once the primary has not answered (nor written its heartbeat file in StateSaveLocation)
for SlurmctldTimeout seconds, so it takes control between SlurmctldTimeout and 4/3 of it after the primary is lost
(measured locally from stopping the primary to a successful sbatch: about 1.5 times SlurmctldTimeout, 45 s with 30).
Slurm's default, 120 s, keeps the cluster without a controller for two minutes; with a backup we render 30 s (Slurm's
own example backup configurations use 30 to 60), still three times MessageTimeout (10 s, Slurm's default and what
we render), so that one slow answer of a busy primary is not taken for its loss. spec.slurmConfig may set both.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, List

from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import Arr, Int, Node, SpecIssue, Str

MAX_CONTROLLERS = 2          # a primary and one backup
HA_SLURMCTLD_TIMEOUT = 30    # SlurmctldTimeout with a backup (see above)
SINGLE_SLURMCTLD_TIMEOUT = 120   # with one controller: Slurm's default
MESSAGE_TIMEOUT = 10         # MessageTimeout: Slurm's default, a third of HA_SLURMCTLD_TIMEOUT
SHARED_MODE = "ReadWriteMany"
ACCESS_MODES = ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany"]


def replicas_schema() -> Node:
    return Int("slurmctld processes: 1, or 2 for a primary and a backup that takes control when the primary is lost "
               "(spool.accessModes must then hold ReadWriteMany: both read and write the same state).",
               minimum=1, maximum=MAX_CONTROLLERS, default=1)


def spool_access_modes_schema() -> Node:
    return Arr(Str(enum=ACCESS_MODES), "Access modes of the spool claim; replicas 2 needs ReadWriteMany (one claim "
               "both controllers mount).", default=["ReadWriteOnce"], min_items=1)


# The CRD's rule (on spec.controller); controller_issues() says the same in Python with the field's path.
CEL_RULES = [
    ("!has(self.replicas) || self.replicas < 2 || (has(self.spool) && has(self.spool.accessModes) && "
     "self.spool.accessModes.exists(m, m == '%s'))" % SHARED_MODE,
     "controller.replicas 2 needs spool.accessModes with %s: both controllers read and write one "
     "StateSaveLocation" % SHARED_MODE, ".spool.accessModes"),
]


def controller_issues(cluster_label: str, controller: Any) -> List[SpecIssue]:
    """spec.controller's rule across fields: a backup controller needs a spool claim both controllers can mount."""
    if not isinstance(controller, dict) or not isinstance(controller.get("replicas"), int):
        return []
    spool = controller.get("spool")
    if not isinstance(spool, dict):
        spool = {}
    modes = spool.get("accessModes", ["ReadWriteOnce"])      # the schema's default
    if controller["replicas"] > 1 and isinstance(modes, list) and SHARED_MODE not in modes:
        return [SpecIssue("%s spec.controller.spool.accessModes" % cluster_label,
                          "%r cannot be shared: controller.replicas %d needs %s (the primary and the backup "
                          "slurmctld read and write one StateSaveLocation; a controller without that state cancels "
                          "the jobs)" % (modes, controller["replicas"], SHARED_MODE))]
    return []


def slurmctld_timeout(replicas: int) -> int:
    return HA_SLURMCTLD_TIMEOUT if replicas > 1 else SINGLE_SLURMCTLD_TIMEOUT
