# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way a worker node leaves the cluster, for both backends: drain with our reason, wait until it runs no job,
stop its slurmd (the local backend; on Kubernetes the pod goes after), then take it out of Slurm (state FUTURE, which
hides it and keeps its definition for a later scale-up).

Which nodes: a NodeSet's StatefulSet removes its highest ordinals first, so shrinking gpu from 6 to 4 removes
gpu-5 and gpu-4; deleting a NodeSet removes all of its nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    SCALE_DOWN_REASON, full_reason, read_nodes, update_nodes_argv, wait_no_jobs)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError


class ScaleDownError(SoperatorError):
    def __init__(self, msg, actions):
        super(ScaleDownError, self).__init__(msg)
        self.actions = actions


def removed_nodes(node_set, live_replicas, desired_replicas):
    """Slurm node names (= pod names) a change from live_replicas to desired_replicas removes, highest first."""
    return ["%s-%d" % (node_set, i) for i in range(live_replicas - 1, max(desired_replicas, 0) - 1, -1)]


def remove_nodes(runner, nodes, prefix, timeout, force=False, check_mode=False, sleep=time.sleep,
                 clock=time.monotonic, poll=2.0, stop_nodes=None):
    """Drain `nodes`, wait (at most `timeout` seconds, not at all with force) until none runs a job, call
    stop_nodes(nodes) when given (-> actions; it stops their slurmds), then set them FUTURE. Returns the list of
    actions done (or, in check mode, that would be done). Raises ScaleDownError when jobs are still running at the
    timeout: the nodes stay drained and nothing else is done, so a re-run goes on."""
    actions = []
    if not nodes:
        return actions
    compressed = hostlist.compress(nodes)
    try:
        records = read_nodes(runner, nodes)
    except SlurmError as e:
        # Fail closed: a node we cannot see is a node we cannot prove idle.
        raise ScaleDownError("cannot read the state of %s from Slurm: %s" % (compressed, e), actions)
    present = [n for n in nodes if not records[n].future]
    if not present:
        return actions + (stop_nodes(nodes) if stop_nodes and not check_mode else [])
    reason = full_reason(prefix, SCALE_DOWN_REASON)
    # A node someone else drained keeps their reason; it is still waited for and removed.
    to_drain = [n for n in present if not records[n].drain]
    foreign = [n for n in present if records[n].drain and not records[n].ours(prefix)]
    where = hostlist.compress(present)
    if check_mode:
        if to_drain:
            actions.append("would drain %s (reason %r)" % (hostlist.compress(to_drain), reason))
        busy = [n for n in present if records[n].busy]
        actions.append("would %s %s, then remove %s from Slurm (state FUTURE)" % (
            "not wait for jobs on" if force else "wait up to %ss for the jobs on" % timeout,
            hostlist.compress(busy) if busy else "(no job running on) " + where, where))
        return actions
    if to_drain:
        runner.run(update_nodes_argv(to_drain, "DRAIN", reason))
        actions.append("drained %s" % hostlist.compress(to_drain))
    if foreign:
        actions.append("kept the drain of %s (set by someone else)" % hostlist.compress(foreign))
    if not force:
        busy, waited = wait_no_jobs(runner, present, timeout, poll=poll, sleep=sleep, clock=clock)
        if busy:
            raise ScaleDownError(
                "scale-down: %s still run jobs after %ds; they stay drained and in the cluster (re-run to go on, or "
                "force=true to remove them anyway)" % (hostlist.compress(busy), int(timeout)), actions)
        actions.append("waited %ds until %s ran no job" % (int(waited), where))
    if stop_nodes:
        actions += stop_nodes(nodes)
    runner.run(update_nodes_argv(present, "FUTURE"))
    actions.append("removed %s from Slurm (state FUTURE)" % where)
    return actions
