# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A changed configuration reaches a local cluster's running slurmds in batches, Slurm-aware: the planner and
executor of slurm/rollout.py, as on Kubernetes, with a slurmd's recorded configuration digest for its pod's revision
and the new configuration's digest for the update revision; replacing a node is restarting its slurmd.

* Only the slurmds whose recorded digest differs from the new one are rolled (local/plan.py outdated_nodes); a node
  without a running slurmd just starts, one on the current configuration is left alone.
* slurmctld restarts first when its configuration changed (as before). A slurmd that started before it is not
  registered with the new slurmctld (slurmctld 22.05 keeps such a node FUTURE): an outdated one is sent SIGHUP, which
  makes slurmd 22.05 re-read the configs and register again - its process and its jobs keep running - so the roll
  sees every node as it is, not as out of service.
* NodeSet ``spec.updateStrategy``: ``slurmAware`` rolls at most ``maxUnavailable`` nodes out of service at once,
  idle nodes first; a busy node is drained with ``"<prefix> upgrade"`` and restarted only once it runs no job, bounded
  by ``rollout_timeout`` (then it stays drained, reported ``waiting``; a later run, or the remediation pass, finishes
  it). After each restart: the new slurmd registers, its health checks run, and it is resumed only when they pass
  (slurm/remediation.py Remediator.restore). ``onDelete`` and ``scheduled`` restart nothing here and report the
  outdated nodes (``skipped``). No job is killed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout, LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import outdated_nodes, wanted_nodes
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import Daemons
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import remediation as rm
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import rollout as slurm_rollout
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError, SlurmRunner

ROLLED_TYPE = "slurmAware"


def not_rolled(node_set, nodes, revisions, update_revision):
    """The entries of a NodeSet whose updateStrategy restarts nothing locally: each outdated node, skipped."""
    strategy = node_set.update_strategy.type
    return [{"node": n, "node_set": node_set.name, "batch": 0, "step": slurm_rollout.SKIP,
             "reason": "its slurmd runs configuration %s, not %s; updateStrategy %s: not restarted"
                       % (revisions[n], update_revision, strategy)}
            for n in slurm_rollout.outdated(nodes, revisions, update_revision)]


def change_line(entry, check_mode=False):
    """The run's `changes` line of one roll entry that acted (slurm/rollout.py acted())."""
    what = "would roll" if check_mode else "rolled"
    return "%s slurmd-%s: batch %s, %s%s (%s)" % (
        what, entry["node"], entry["batch"], entry["step"],
        " [%s]" % ", ".join(entry["steps"]) if entry.get("steps") else "", entry["reason"])


class RolloutFailed(LocalClusterError):
    """A roll's errors, raised after its entries were recorded: `steps` are the entries up to then."""

    def __init__(self, msg, steps):
        super(RolloutFailed, self).__init__(msg)
        self.steps = steps


class _HeldLock(object):
    """remediation.LocalReplacer's cluster inside a run: the run holds the state directory's lock already, and the
    restarted slurmd is recorded with the configuration it starts with."""

    def __init__(self, daemons, digest):
        self.daemons = daemons
        self.digest = digest

    def restart_node(self, node):
        return self.daemons.restart_slurmd(node, self.digest)


class Rollout(object):
    """A local cluster's rolling slurmd restarts: through `daemons` (local/processes.py Daemons), with the cluster's
    Slurm runner from `slurm` and its health check under layout.bin. `timeout` bounds a slurmd's registration and
    a health check, `rollout_timeout` the wait for a busy node's jobs."""

    def __init__(self, layout: Layout, daemons: Daemons, slurm: Callable[[], SlurmRunner], timeout: float,
                 rollout_timeout: float) -> None:
        self.layout = layout
        self.daemons = daemons
        self.slurm = slurm
        self.timeout = timeout
        self.rollout_timeout = rollout_timeout

    def register_again(self, name: str, changes: List[str]) -> bool:
        """SIGHUP an outdated slurmd that registered with an earlier slurmctld: it re-reads the configs and
        registers with the running one, its jobs untouched. True when signalled."""
        if self.daemons.ctld_instance() is None or not self.daemons.send_signal(name, signal.SIGHUP):
            return False
        changes.append("signalled %s to register with the restarted slurmctld (SIGHUP; it keeps its jobs and is "
                       "restarted by the roll)" % name)
        return True

    def registered_again(self, names: Iterable[str]) -> None:
        """Record `names` as registered with the running slurmctld (slurmds_behind), once Slurm showed them
        responding: a slurmd that did not register is still behind, and the next run signals it again."""
        for name in names:
            self.daemons.mark_registered(name)

    def _revisions(self, nodes):
        running = self.daemons.running_records()
        return dict((n, (running.get("slurmd-%s" % n) or {}).get("digest")) for n in nodes)

    def roll(self, model: Any, digest: str, outdated: Sequence[str], changes: List[str],
             check_mode: bool = False) -> List[Dict[str, Any]]:
        """Roll each NodeSet's `outdated` nodes onto `digest`; -> the roll's entries (slurm/rollout.py). Acted
        entries go to `changes`; a roll's errors raise RolloutFailed (with the entries so far)."""
        steps: List[Dict[str, Any]] = []
        if not outdated:
            return steps
        prefix = model.remediation.drain_reason_prefix
        for node_set in model.node_sets:
            nodes = [node_set.node_name(i) for i in range(node_set.replicas)]
            if not set(nodes) & set(outdated):
                continue
            if node_set.update_strategy.type != ROLLED_TYPE:
                steps += not_rolled(node_set, nodes, self._revisions(nodes), digest)
                continue

            def inputs(nodes=nodes):
                return nodes, self._revisions(nodes), digest
            checker = rm.LocalChecker(os.path.join(self.layout.bin, "health-check"),
                                      slurm_conf=self.layout.slurm_conf, timeout=self.timeout)
            remediator = rm.Remediator(self.slurm(), prefix, checker,
                                       replacer=rm.LocalReplacer(_HeldLock(self.daemons, digest)),
                                       check_mode=check_mode, register_timeout=self.timeout, poll=0.5)
            roll = slurm_rollout.Rollout(self.slurm(), prefix, inputs, remediator,
                                         node_set.update_strategy.max_unavailable, self.rollout_timeout,
                                         node_set.name, check_mode=check_mode, poll=0.5)
            try:
                done = roll.run()
            except SlurmError as e:
                raise LocalClusterError("rolling the slurmds of NodeSet %s: %s" % (node_set.name, e))
            steps += done
            changes += [change_line(s, check_mode) for s in done if slurm_rollout.acted(s, check_mode)]
            if roll.errors:
                raise RolloutFailed("rolling the slurmds of NodeSet %s: %s" % (node_set.name, "; ".join(roll.errors)),
                                    steps)
        return steps

    def plan(self, model: Any, digest: Optional[str],
             status: Mapping[str, Any]) -> Tuple[List[Dict[str, Any]], List[str]]:
        """Check mode: the roll a run would make, from the same plan, over the nodes Slurm lists now (their slurmds
        register again, unrestarted, when slurmctld restarts). -> (entries, 'would ...' actions)."""
        running = set(n for n, p in status["processes"].items() if p["running"])
        if digest is None or "slurmctld" not in running or status.get("nodes") is None:
            return [], []
        outdated = outdated_nodes(wanted_nodes(model), self.daemons.running_records(), digest)
        actions: List[str] = []
        return self.roll(model, digest, outdated, actions, check_mode=True), actions
