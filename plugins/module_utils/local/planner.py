# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check mode of a local cluster: what ensure_started() and stop() would do, as 'would ...' actions, from the same
functions (local/plan.py) and the collaborators' own plans that the real run uses. Reads only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local.exporter import Exporter
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout, ports_needed
from ansible_collections.soperator.slurm.plugins.module_utils.local.login import LoginNode
from ansible_collections.soperator.slurm.plugins.module_utils.local import power
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import (
    SLURMD, nodes_to_remove, outdated_nodes, slurm_digest, start_order, stop_order, wanted_nodes)
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import PortBlock
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import Daemons, munged_digest
from ansible_collections.soperator.slurm.plugins.module_utils.local.rest import RestServer
from ansible_collections.soperator.slurm.plugins.module_utils.local.rollout import Rollout
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import (
    MOUNT_POINT_STAYS, StateDir, current_text)


class Planner(object):
    """The check-mode half of a local cluster: every list here comes from local/plan.py's functions and the
    collaborators' plans, which the real run uses too. Reads only. `configs(model, base_port, db_password)` renders the cluster's
    config files as a run writes them."""

    def __init__(self, layout: Layout, directory: StateDir, ports: PortBlock, daemons: Daemons,
                 rollout: Rollout, login: LoginNode, exporter: Exporter,
                 configs: Callable[[Any, int, Optional[str]], Dict[str, str]], identity: Any = None,
                 rest: Optional[RestServer] = None) -> None:
        self.layout = layout
        self.directory = directory
        self.ports = ports
        self.daemons = daemons
        self.rollout = rollout
        self.login = login
        self.exporter = exporter
        self.configs = configs
        self.identity = identity      # local/identity.py LocalIdentity: its plan() (sssd, the bind watcher)
        self.rest = rest              # local/rest.py RestServer: its plan() (slurmrestd)

    def present(self, model: Any, status: Mapping[str, Any]) -> Tuple[List[str], List[Dict[str, Any]]]:
        """What ensure_started(model) would do, as 'would ...' actions, from status() and the files under
        state_dir, and the roll's entries; changes nothing. A directory that is not ours fails here, as the run
        would (a roll's errors: local/rollout.py RolloutFailed)."""
        lay = self.layout
        kind = self.directory.plan_take()
        pre = ["would mark %s as this cluster's state directory (made by an earlier version)" % lay.state_dir] \
            if kind == "legacy" else []
        if kind == "absent":
            actions = ["would create state directory %s" % lay.state_dir, "would generate munge key"]
            if model.accounting.enabled:
                actions += ["would initialize the accounting database"]
            actions += ["would write the Slurm configs to %s" % lay.etc] + power.plan(lay, bool(model.cloud_nodes))
            actions += ["would start munged"] + self._identity(model)
            actions += ["would start %s" % d for d in start_order(model) if d != "munged"]
            actions += ["would generate JWT key", "would start slurmrestd"] if model.rest_api is not None else []
            return actions + self.login.plan(model) + self.exporter.plan(model), []
        actions, slurm_changed, dbd_changed, digest = self._plan_configs(model)
        actions = pre + actions + power.plan(lay, bool(model.cloud_nodes))
        key_missing = not os.path.exists(lay.munge_key)
        if key_missing:
            actions.append("would generate munge key")
        if model.rest_api is not None and not os.path.exists(lay.jwt_key):
            actions.append("would generate JWT key")
        running = set(name for name, p in status["processes"].items() if p["running"])
        # munged runs with another key than the file's (or the file is gone): the run restarts it
        munged = self.daemons.running_records().get("munged")
        changed_by = {"slurmctld": slurm_changed, "slurmdbd": dbd_changed,
                      "munged": munged is not None and (key_missing or munged.get("digest") != munged_digest(lay))}
        # a slurmd registers once: one started before the slurmctld that will run restarts (slurmds_behind)
        new_ctld = "slurmctld" not in running or slurm_changed
        behind = set(self.daemons.slurmds_behind())
        # slurmds on an old configuration are rolled (local/rollout.py), in batches: the same plan says how
        listed_now = set(n["name"] for n in (status["nodes"] or []))
        outdated = set() if digest is None else set(
            SLURMD + n for n in outdated_nodes(wanted_nodes(model), self.daemons.running_records(), digest))
        for name in start_order(model):
            if name not in running:
                actions.append("would start %s" % name)
            elif name in outdated:
                if new_ctld or name in behind:
                    actions.append("would signal %s to register with the restarted slurmctld (SIGHUP; it keeps its "
                                   "jobs and is restarted by the roll)" % name)
                elif name[len(SLURMD):] not in listed_now:
                    actions.append("would restart %s (configuration changed)" % name)
            elif changed_by.get(name, slurm_changed if name.startswith(SLURMD) and digest is None else False):
                actions.append("would restart %s (configuration changed)" % name)
            elif name.startswith(SLURMD) and (new_ctld or name in behind):
                actions.append("would restart %s (slurmctld restarted: the node registers again)" % name)
        actions += self._identity(model)
        if not model.accounting.enabled:
            actions += ["would stop %s (accounting disabled)" % n for n in ("slurmdbd", "mariadbd") if n in running]
        steps, rolled = self.rollout.plan(model, digest, status)
        actions += rolled
        listed = [n["name"] for n in (status["nodes"] or [])]
        running_nodes = [n[len(SLURMD):] for n in running if n.startswith(SLURMD)]
        for node in nodes_to_remove(model, running_nodes, listed):
            actions.append("would drain %s, wait for its jobs, stop its slurmd and remove it from Slurm" % node)
        rest = self.rest.plan(model, self.ports.plan(model)[0], digest) if self.rest is not None else []
        return actions + self.login.plan(model) + self.exporter.plan(model) + rest, steps

    def _identity(self, model):
        return self.identity.plan(model) if self.identity is not None else []

    def _plan_configs(self, model):
        """(actions, slurm_changed, dbd_changed, digest): which config files under state_dir/etc a run would write,
        and the digest a run records with slurmctld and the slurmds (None when it cannot be known yet)."""
        lay = self.layout
        base_port, actions = self.ports.plan(model)
        if base_port is None:
            actions.append("would choose %d free loopback ports and write the Slurm configs to %s"
                           % (ports_needed(model), lay.etc))
            return actions, True, True, None
        password = None
        if model.accounting.enabled:
            password = current_text(lay.db_password)
            if password is None:
                actions.append("would generate the database password")
                return actions + ["would write the Slurm configs to %s" % lay.etc], True, True, None
            password = password.strip()
        configs = self.configs(model, base_port, password)
        slurm_changed = dbd_changed = False
        for name, text in sorted(configs.items()):
            old = current_text(os.path.join(lay.etc, name))
            if old != text:
                actions.append("would %s %s" % ("update" if old is not None else "write", name))
                if name == c.SLURMDBD_CONF:
                    dbd_changed = True
                else:
                    slurm_changed = True
        if os.path.isdir(lay.etc):
            for name in sorted(os.listdir(lay.etc)):
                if name not in configs and not name.startswith("."):
                    actions.append("would remove %s" % name)
                    slurm_changed = True
        return actions, slurm_changed, dbd_changed, slurm_digest(configs)

    def absent(self, purge: bool, status: Mapping[str, Any]) -> List[str]:
        """What stop(purge) would do, as 'would ...' actions, in the order it would do it. Raises, before anything,
        for a directory that is not ours, as stop() would."""
        lay = self.layout
        kind = self.directory.ownership()
        doomed = self.directory.purge_plan() if purge else []
        running = [name for name, p in status["processes"].items() if p["running"]]
        actions = ["would stop %s" % n for n in stop_order(running)]
        if kind == "legacy":
            actions.insert(0, "would mark %s as this cluster's state directory (made by an earlier version)"
                           % lay.state_dir)
        if kind not in ("absent", "empty"):
            ours = set(status["processes"][n]["pid"] for n in running)
            actions += ["would stop %s[%d] (leftover)" % (comm, pid) for pid, comm in self.daemons.leftover_processes()
                        if pid not in ours]
        if purge and kind not in ("absent", "empty"):
            kept = sorted(set(os.listdir(lay.state_dir)) - set(os.path.basename(p) for p in doomed))
            if kept:
                actions.append("would delete %s in %s (kept: %s)" % (", ".join(os.path.basename(p) for p in doomed),
                                                                     lay.state_dir, ", ".join(kept)))
            elif os.path.ismount(lay.state_dir):
                actions.append("would delete %s (%s)" % (lay.state_dir, MOUNT_POINT_STAYS))
            else:
                actions.append("would delete %s" % lay.state_dir)
        return actions
