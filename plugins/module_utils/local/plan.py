# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a local cluster's run will do, decided once: the orders and the node sets that ensure_started() and stop()
execute, and the 'would ...' lists check mode reports from the same functions. Reads only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    EXPORTER_DAEMON, LOGIN_DAEMON, ports_needed)
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import MOUNT_POINT_STAYS, current_text

SLURMD = "slurmd-"
# Started in this order (the slurmds after them, in the model's order); stopped in the reverse, after the slurmds.
_SERVICES = ("munged", "mariadbd", "slurmdbd", "slurmctld")


def _digest(*texts):
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") if isinstance(t, str) else t)
        h.update(b"\0")
    return h.hexdigest()[:16]


def slurm_digest(configs):
    """The configuration slurmctld and each slurmd run with, recorded with them: every config file (name -> text)
    but slurmdbd.conf (slurmdbd's own) and health.json (read at each health check run: its change restarts
    nothing)."""
    return _digest(*["%s\n%s" % (k, v) for k, v in sorted(configs.items())
                     if k not in (c.SLURMDBD_CONF, c.HEALTH_CONFIG_FILE)])


def outdated_nodes(nodes, running_records, digest):
    """Of `nodes`, those whose slurmd runs (a live record) with another configuration than `digest`: the slurmds a
    changed configuration restarts, in batches (local/rollout.py). Nodes without a running slurmd just start."""
    return [n for n in nodes if SLURMD + n in running_records and
            running_records[SLURMD + n].get("digest") != digest]


def natural_key(name):
    """cpu-2 before cpu-10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def wanted_nodes(model):
    """The nodes that run, in the model's order (NodeSets in spec order, then by index)."""
    return [ns.node_name(i) for ns in model.node_sets for i in range(ns.replicas)]


def start_order(model):
    """The daemons ensure_started() brings up, in the order it does."""
    services = ["munged"] + (["mariadbd", "slurmdbd"] if model.accounting.enabled else []) + ["slurmctld"]
    return services + [SLURMD + n for n in wanted_nodes(model)]


def stop_order(names):
    """The order stop() stops the daemons `names` in: the login sshd (sessions may submit jobs) and the exporter
    (it asks slurmctld), the slurmds, then slurmctld, accounting and munged, then anything else recorded."""
    names = list(names)
    login = [n for n in (LOGIN_DAEMON, EXPORTER_DAEMON) if n in names]
    slurmds = sorted((n for n in names if n.startswith(SLURMD)), key=natural_key)
    services = [n for n in reversed(_SERVICES) if n in names]
    rest = sorted(n for n in names if n not in login + slurmds + services)
    return login + slurmds + services + rest


def nodes_to_remove(model, running_nodes, listed_nodes):
    """Nodes a run drains and removes: running slurmds and nodes slurmctld lists that the model does not want."""
    return sorted((set(running_nodes) | set(listed_nodes)) - set(wanted_nodes(model)), key=natural_key)


class LocalPlan(object):
    """The check-mode half of LocalCluster (mixed into it): every list here comes from the functions above, which
    the real run uses too."""

    def plan_present(self, model, status):
        """What ensure_started(model) would do, as 'would ...' actions, from status() and the files under
        state_dir; changes nothing. A directory that is not ours fails here, as the run would."""
        lay = self.layout
        kind = self.plan_take()
        pre = ["would mark %s as this cluster's state directory (made by an earlier version)" % lay.state_dir] \
            if kind == "legacy" else []
        if kind == "absent":
            actions = ["would create state directory %s" % lay.state_dir, "would generate munge key"]
            if model.accounting.enabled:
                actions += ["would initialize the accounting database"]
            actions += ["would write the Slurm configs to %s" % lay.etc]
            actions += ["would start %s" % d for d in start_order(model)]
            return actions + self.plan_login(model) + self.plan_exporter(model)
        actions, slurm_changed, dbd_changed, digest = self._plan_configs(model)
        actions = pre + actions
        key_missing = not os.path.exists(lay.munge_key)
        if key_missing:
            actions.append("would generate munge key")
        running = set(name for name, p in status["processes"].items() if p["running"])
        # munged runs with another key than the file's (or the file is gone): the run restarts it
        munged = self._running_records().get("munged")
        changed_by = {"slurmctld": slurm_changed, "slurmdbd": dbd_changed,
                      "munged": munged is not None and (key_missing or munged.get("digest") != self._munged_digest())}
        # a slurmd registers once: one started before the slurmctld that will run restarts (slurmds_behind)
        new_ctld = "slurmctld" not in running or slurm_changed
        behind = set(self.slurmds_behind())
        # slurmds on an old configuration are rolled (local/rollout.py), in batches: the same plan says how
        listed_now = set(n["name"] for n in (status["nodes"] or []))
        outdated = set() if digest is None else set(
            SLURMD + n for n in outdated_nodes(wanted_nodes(model), self._running_records(), digest))
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
        if not model.accounting.enabled:
            actions += ["would stop %s (accounting disabled)" % n for n in ("slurmdbd", "mariadbd") if n in running]
        self.rollout_steps, rolled = self.plan_rollout(model, digest, status)
        actions += rolled
        listed = [n["name"] for n in (status["nodes"] or [])]
        running_nodes = [n[len(SLURMD):] for n in running if n.startswith(SLURMD)]
        for node in nodes_to_remove(model, running_nodes, listed):
            actions.append("would drain %s, wait for its jobs, stop its slurmd and remove it from Slurm" % node)
        return actions + self.plan_login(model) + self.plan_exporter(model)

    def _plan_configs(self, model):
        """(actions, slurm_changed, dbd_changed, digest): which config files under state_dir/etc a run would write,
        and the digest a run records with slurmctld and the slurmds (None when it cannot be known yet)."""
        lay = self.layout
        base_port, actions = self.plan_ports(model)
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
        configs = local_slurm_configs(model, lay.state_dir, base_port, user=self.user, db_password=password,
                                      jail_dir=self.jail_dir, spank_chroot=self.spank_chroot,
                                      renderer=self._renderer)
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

    def plan_absent(self, purge, status):
        """What stop(purge) would do, as 'would ...' actions, in the order it would do it. Raises, before anything,
        for a directory that is not ours, as stop() would."""
        lay = self.layout
        kind = self.ownership()
        doomed = self.purge_plan() if purge else []
        running = [name for name, p in status["processes"].items() if p["running"]]
        actions = ["would stop %s" % n for n in stop_order(running)]
        if kind == "legacy":
            actions.insert(0, "would mark %s as this cluster's state directory (made by an earlier version)"
                           % lay.state_dir)
        if kind not in ("absent", "empty"):
            ours = set(status["processes"][n]["pid"] for n in running)
            actions += ["would stop %s[%d] (leftover)" % (comm, pid) for pid, comm in self.leftover_processes()
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
