# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurm_cluster's target=local as one call: state present or absent, the module's result (actions, nodes, login,
diff). Check mode reports the plan (local/plan.py) the real run executes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.local import plan
from ansible_collections.soperator.slurm.plugins.module_utils.local.backend import LocalCluster
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    EXPORTER_DAEMON, LOGIN_DAEMON, LocalClusterError, default_state_dir)


class LocalOperationError(SoperatorError):
    """The operation failed; `result` is what the module returns with the message."""

    def __init__(self, msg, result):
        super(LocalOperationError, self).__init__(msg)
        self.result = result


def run(model, params, check_mode=False, diff=False):
    """params: the module's state, state_dir, wait_timeout, jail_dir, spank_chroot, login, login_authorized_keys,
    purge, rollout_timeout and identity_secrets. -> the result; LocalOperationError (with the partial result) on failure."""
    state = params["state"]
    timeout = params["wait_timeout"]
    cluster = LocalCluster(params["state_dir"] or default_state_dir(model.name), model, timeout=timeout,
                           drain_timeout=timeout, jail_dir=params["jail_dir"], spank_chroot=params["spank_chroot"],
                           login=params["login"], login_authorized_keys=params["login_authorized_keys"],
                           rollout_timeout=params.get("rollout_timeout", 600),
                           identity_secrets=params.get("identity_secrets"))
    result = dict(changed=False, actions=[], state_dir=cluster.state_dir, env=cluster.env())
    if model is not None:
        result["cluster"] = model.summary()
    try:
        if state == "present":
            cluster.check_inputs()           # before any write, in check mode too
        before = cluster.status()
        if state == "present":
            _present(cluster, model, before, result, check_mode, diff)
        else:
            _absent(cluster, before, result, params["purge"], check_mode, diff)
    except LocalClusterError as e:
        result.pop("changed")
        if cluster.rollout_steps:
            result["rollout"] = list(cluster.rollout_steps)
        if state == "present":
            result["logs"] = cluster.log_files()      # of every daemon it recorded: the one that failed among them
        raise LocalOperationError(str(e), result)
    return result


def _nodes(status_nodes):
    return [{"name": n.get("name"), "state": (n.get("state") or "").lower(), "state_flags": n.get("state_flags") or [],
             "partitions": n.get("partitions") or []} for n in (status_nodes or [])]


def _running(status):
    return sorted(name for name, p in status["processes"].items() if p["running"])


def _present(cluster, model, before, result, check_mode, diff):
    if check_mode:
        actions = cluster.plan_present(model, before)
        after_daemons = sorted(plan.start_order(model) + ([LOGIN_DAEMON] if cluster.wants_login() else [])
                               + ([EXPORTER_DAEMON] if model.observability.exporter.enabled else []))
        after_nodes = sorted(plan.wanted_nodes(model), key=plan.natural_key)
        result["nodes"] = _nodes(before["nodes"])
    else:
        actions = cluster.ensure_started(model)["changes"]
        after = cluster.status()
        after_daemons = _running(after)
        result["nodes"] = _nodes(after["nodes"])
        after_nodes = [n["name"] for n in result["nodes"]]
    result["login"] = cluster.login_address()
    result["exporter"] = cluster.exporter_address()
    result["monitoring"] = cluster.monitoring_paths()
    result["logs"] = cluster.log_files(after_daemons)
    result.update(changed=bool(actions), actions=actions, rollout=list(cluster.rollout_steps))
    if diff:
        result["diff"] = {
            "before": {"daemons": _running(before), "nodes": [n["name"] for n in _nodes(before["nodes"])]},
            "after": {"daemons": after_daemons, "nodes": after_nodes},
        }


def _absent(cluster, before, result, purge, check_mode, diff):
    lay = cluster.layout
    running = _running(before)
    try:
        # Only a directory that is ours is stopped or purged; anything else fails here, before a signal or a delete.
        if check_mode:
            actions = cluster.plan_absent(purge, before)
        else:
            cluster.ownership()
            if purge:
                cluster.purge_plan()
    except LocalClusterError as e:
        raise LocalClusterError("refusing to %s %s: %s" % ("purge" if purge else "stop", lay.state_dir, e))
    if not check_mode:
        done = cluster.stop(purge=purge)
        actions = [s if s.startswith(("purged ", "marked ")) else "stopped %s" % s for s in done["stopped"]]
    result.update(changed=bool(actions), actions=actions)
    if diff:
        result["diff"] = {"before": {"daemons": running, "state_dir_exists": os.path.isdir(lay.state_dir)},
                          "after": {"daemons": [], "state_dir_exists": os.path.isdir(lay.state_dir) and (
                              not purge or os.path.ismount(lay.state_dir))}}
