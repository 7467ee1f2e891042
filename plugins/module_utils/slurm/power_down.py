# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Upgrades of ephemeral NodeSets' powered-up workers (docs/ephemeral-workers.md): a worker that runs an older pod
template is handed back to Slurm's power saving, which powers it down once no job runs on it; the next resume makes
it from the current template. Powered-down nodes need nothing: their next resume reads the current template anyway.

The node gets ``State=POWER_DOWN_ASAP Reason="<prefix> upgrade"``: slurmctld drains it (no new job lands, running
jobs finish), runs our SuspendProgram when it is idle, and clears that drain as it powers the node down. No job is
ever killed, and no pod is deleted here: the SuspendProgram does that, as for any idle node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    UPGRADE_REASON, full_reason, read_sinfo, update_nodes_argv)

POWER_DOWN_ASAP = "POWER_DOWN_ASAP"


def plan(records, names, prefix):
    """(nodes to power down, [kept-lines]) of `names` (outdated ephemeral workers) by their Slurm records: only a
    CLOUD node that is up, not on its way down already, and not held by anyone but our upgrade drain."""
    ours = full_reason(prefix, UPGRADE_REASON)
    todo, kept = [], []
    for name in sorted(names):
        record = records.get(name)
        if record is None or not record.cloud:
            kept.append("kept %s: not a node Slurm powers up and down" % name)
        elif record.power:
            kept.append("kept %s: %s already" % (name, record.power.replace("_", " ")))
        elif record.held and record.reason != ours:
            kept.append("kept %s: %s (%s): left to its owner" % (name, record.state.lower(),
                                                                 record.reason or "no reason"))
        else:
            todo.append(name)
    return todo, kept


def power_down_outdated(runner, names, prefix, check_mode=False):
    """Hand the outdated ephemeral workers `names` back to power saving (POWER_DOWN_ASAP with our upgrade reason);
    returns what was done (or would be), one line per node."""
    if not names:
        return []
    todo, kept = plan(read_sinfo(runner), names, prefix)
    if todo and not check_mode:
        runner.run(update_nodes_argv(todo, POWER_DOWN_ASAP, full_reason(prefix, UPGRADE_REASON)))
    verb = "would power down" if check_mode else "powering down"
    return ["%s %s once idle: its pod runs an older template" % (verb, name) for name in todo] + kept
