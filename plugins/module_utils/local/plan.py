# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a local cluster's run will do, decided once: the orders and the node sets that ensure_started() and stop()
execute; check mode's 'would ...' lists (local/planner.py) come from the same functions. Reads only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    EXPORTER_DAEMON, LOGIN_DAEMON, REST_DAEMON)


SLURMD = "slurmd-"
# Started in this order (the slurmds after them, in the model's order); stopped in the reverse, after the slurmds.
_SERVICES = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmctld-1")    # -1: the backup (controllers.py)


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
    """The order stop() stops the daemons `names` in: the login sshd (sessions may submit jobs), the exporter and
    slurmrestd (they ask slurmctld), the slurmds, then slurmctld, accounting and munged, then anything else recorded."""
    names = list(names)
    login = [n for n in (LOGIN_DAEMON, EXPORTER_DAEMON, REST_DAEMON) if n in names]
    slurmds = sorted((n for n in names if n.startswith(SLURMD)), key=natural_key)
    services = [n for n in reversed(_SERVICES) if n in names]
    rest = sorted(n for n in names if n not in login + slurmds + services)
    return login + slurmds + services + rest


def nodes_to_remove(model, running_nodes, listed_nodes):
    """Nodes a run drains and removes: running slurmds and nodes slurmctld lists that the model does not want.
    Nodes Slurm powers up and down are Slurm's: never removed here, running or not."""
    keep = set(wanted_nodes(model)) | set(model.cloud_nodes)
    return sorted((set(running_nodes) | set(listed_nodes)) - keep, key=natural_key)
