# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm-aware rolling upgrades of a NodeSet's workers (``spec.updateStrategy.type: slurmAware``).

A worker is *outdated* when its pod's revision (label ``controller-revision-hash``) is not the StatefulSet's
``status.updateRevision``: its pod template (image, resources, env, mounts) changed since the pod was made. Workers
use OnDelete, so only deleting the pod gives it the new template. What to replace, and when, is decided here, by one
pure planner (``plan``) that the real run executes and check mode reports:

* Never more than ``maxUnavailable`` workers of the NodeSet are out of service at once, counting those already out:
  drained or down for any reason, not responding, not registered in Slurm, or without a pod.
* Idle outdated workers go first; a busy one is drained with ``"<prefix> upgrade"`` (no new job lands on it) and
  replaced only once it runs no job. No job is ever killed: a node is replaced only after squeue lists no job on it.
* A worker already drained with our upgrade reason is in the roll: it holds its slot, and is replaced once idle (by
  a later run, or by the remediation pass, which replaces our idle drained nodes). One drained with another reason
  is left alone: someone else's (foreign), our scale-down's, or our health checks' (remediation replaces it, and
  the new pod has the new template anyway).
* After a replacement the node goes through the steps remediation uses (slurm/remediation.py ``Remediator.restore``):
  wait for the new slurmd to register, run its health checks, resume it only when every check passes.

``Rollout`` executes it batch by batch: each batch is planned from a fresh read (so a node a batch left drained
keeps its slot), drained, waited for (bounded by ``timeout``; at the timeout the busy nodes stay drained and are
reported ``waiting``, and nothing more is started), replaced and restored.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
from dataclasses import dataclass

from ansible_collections.soperator.slurm.plugins.module_utils import wait
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    SCALE_DOWN_REASON, UPGRADE_REASON, full_reason, read_jobs, read_sinfo, set_state, wait_no_jobs)

# What the plan says of a node (check mode reports these; the real run the outcomes below).
REPLACE = "replace"        # in service and idle: drained (so no job lands), replaced, re-checked, resumed
DRAIN = "drain"            # in service and busy: drained, replaced once it runs no job
WAIT = "wait"              # drained by the roll already and still busy: replaced once it runs no job
RECHECK = "recheck"        # on the new revision but still drained by the roll: re-checked and resumed
SKIP = "skipped"           # not rolled now (why: the reason)
PLAN_STEPS = (REPLACE, DRAIN, WAIT, RECHECK)
# Outcomes of the real run.
RESUMED, LEFT_DRAINED, WAITING, PENDING = "resumed", "left-drained", "waiting", "pending"


@dataclass
class NodeStep:
    node: str
    batch: int          # 1, 2, ... ; 0 for a node left out of every batch
    step: str
    reason: str
    drain: bool = False     # in service now: the run drains it first

    def to_dict(self):
        return {"node": self.node, "batch": self.batch, "step": self.step, "reason": self.reason}


@dataclass
class RolloutPlan:
    steps: list         # NodeStep: the batches in order, then the nodes left out
    unavailable: list   # nodes out of service when the plan was made

    def batch(self, number):
        return [s for s in self.steps if s.batch == number]

    @property
    def batches(self):
        return sorted(set(s.batch for s in self.steps if s.batch))

    @property
    def acts(self):
        return any(s.step in PLAN_STEPS for s in self.steps)


def outdated(nodes, revisions, update_revision):
    """Of `nodes` (in order), those on another revision than `update_revision`; a node without one (no pod, no
    slurmd) is not outdated: it comes up on the new one."""
    return [n for n in nodes if revisions.get(n) not in (None, update_revision)]


def plan(nodes, revisions, update_revision, records, jobs, max_unavailable, prefix):
    """The roll of one NodeSet.

    nodes: its workers in ordinal order (pod name = Slurm node name); revisions: node -> its pod's revision, None
    without a pod; update_revision: the StatefulSet's status.updateRevision; records: name -> NodeRecord of every
    node Slurm shows (read_sinfo); jobs: name -> running jobs (read_jobs); max_unavailable >= 1."""
    if max_unavailable < 1:
        raise ValueError("max_unavailable must be >= 1")
    upgrade = full_reason(prefix, UPGRADE_REASON)
    scale_down = full_reason(prefix, SCALE_DOWN_REASON)
    out, rolling, idle, busy, left_out = [], [], [], [], []
    for name in nodes:
        record = records.get(name)
        revision = revisions.get(name)
        outdated = revision is not None and revision != update_revision
        njobs = jobs.get(name) or 0
        is_busy = bool(njobs) or (record is not None and record.busy)
        what_runs = "%d job(s) run on it" % njobs if njobs else "jobs are completing on it"
        if revision is None:
            out.append(name)
            left_out.append(NodeStep(name, 0, SKIP, "no pod: the StatefulSet makes it from the new template"))
            continue
        if record is None or record.future:
            out.append(name)
            if outdated:
                left_out.append(NodeStep(name, 0, SKIP, "its slurmd is not registered in Slurm"))
            continue
        ours_upgrade = record.drain and record.reason == upgrade
        if ours_upgrade:
            out.append(name)
            if not outdated:
                rolling.append(NodeStep(name, 0, RECHECK, "on revision %s, still drained (%s): re-check, then "
                                        "resume" % (revision, upgrade)))
            elif is_busy:
                rolling.append(NodeStep(name, 0, WAIT, "drained (%s); %s: replaced once it runs no job"
                                        % (upgrade, what_runs)))
            else:
                rolling.append(NodeStep(name, 0, REPLACE, "drained (%s) and idle: replace it" % upgrade))
            continue
        if record.held or "NOT_RESPONDING" in record.flags:
            out.append(name)
            if outdated:
                left_out.append(NodeStep(name, 0, SKIP, _held_why(record, prefix, scale_down)))
            continue
        if not outdated:
            continue
        why = "revision %s, not %s" % (revision, update_revision)
        if is_busy:
            busy.append(NodeStep(name, 0, DRAIN, "%s; %s: drain it (%s), replace it once it runs no job"
                                 % (why, what_runs, upgrade), drain=True))
        else:
            idle.append(NodeStep(name, 0, REPLACE, "%s; idle: replace it" % why, drain=True))
    steps = []
    # Out of service for other reasons than the roll: they stay out while the batches go.
    staying_out = len(out) - len(rolling)
    size = max_unavailable - staying_out
    candidates = idle + busy
    if rolling:
        free = max(size - len(rolling), 0)
        first, candidates = candidates[:free], candidates[free:]
        for s in [r for r in rolling if r.step != WAIT] + [r for r in rolling if r.step == WAIT] + first:
            s.batch = 1
            steps.append(s)
    if size < 1:
        for s in candidates:
            s.step, s.batch, s.drain = SKIP, 0, False
            s.reason = "maxUnavailable %d reached: %d worker(s) out of service (%s)" % (
                max_unavailable, len(out), hostlist.compress(out))
        left_out = candidates + left_out
        candidates = []
    number = 1 if rolling else 0
    for start in range(0, len(candidates), max(size, 1)):
        number += 1
        for s in candidates[start:start + size]:
            s.batch = number
            steps.append(s)
    return RolloutPlan(steps + left_out, list(out))


def _held_why(record, prefix, scale_down):
    if not record.held:
        return "not responding: left until its slurmd answers"
    if not record.ours(prefix):
        return "held by someone else (%s: %s): left alone" % (record.state, record.reason or "no reason")
    if record.reason == scale_down:
        return "drained by a scale-down: it leaves the cluster"
    return "drained by us (%s): the remediation replaces it, with the new template" % record.reason


def acted(entry, check_mode=False):
    """Did (would, in check mode) this step of a roll change the node: drain, replace or resume it?"""
    if check_mode:
        return entry["step"] in PLAN_STEPS
    return bool(set(entry.get("steps") or ()) & set(["drained", "replaced", "resumed"]))


# --- execution -------------------------------------------------------------------------------------------------

class _Late(Exception):
    pass


class Rollout(object):
    """Executes (or, in check mode, reports) the roll of one NodeSet.

    inputs() -> (nodes, revisions, update_revision), read afresh (the Kubernetes side); remediator: a
    slurm/remediation.Remediator whose restore() replaces, waits for registration, re-checks and resumes."""

    def __init__(self, runner, prefix, inputs, remediator, max_unavailable, timeout, node_set, check_mode=False,
                 poll=2.0, sleep=time.sleep, clock=time.monotonic):
        self.runner = runner
        self.prefix = prefix
        self.inputs = inputs
        self.remediator = remediator
        self.max_unavailable = max_unavailable
        self.timeout = timeout
        self.node_set = node_set
        self.check_mode = check_mode
        self.poll = poll
        self.sleep = sleep
        self.clock = clock
        self.errors = []

    def _plan(self, nodes, revisions, update_revision):
        records = read_sinfo(self.runner)
        jobs = read_jobs(self.runner)
        return plan(nodes, revisions, update_revision, records, jobs, self.max_unavailable, self.prefix), records

    def _entry(self, step, batch=None, outcome=None, reason=None):
        return {"node": step.node, "node_set": self.node_set, "batch": step.batch if batch is None else batch,
                "step": outcome or step.step, "reason": reason or step.reason}

    def run(self, first=None):
        """-> the steps of every node the roll concerns, in order ({node, node_set, batch, step, reason}). `first`:
        what inputs() would say now, when the caller has just read it (no second read)."""
        nodes, revisions, update_revision = first or self.inputs()
        if not outdated(nodes, revisions, update_revision):
            # Nothing outdated: no Slurm read. A node on the new revision still drained by a roll (its resume failed)
            # is the remediation pass's: it re-checks and resumes our idle drained nodes.
            return []
        the_plan, _records = self._plan(nodes, revisions, update_revision)
        if self.check_mode:
            return [self._entry(s) for s in the_plan.steps]
        done, handled, batch_number = [], set(), 0
        while True:
            if not the_plan.batches:
                break       # nothing may start: every node is left out (no slot, held by others...)
            batch = [s for s in the_plan.batch(the_plan.batches[0]) if s.node not in handled]
            if not batch:
                break
            batch_number += 1
            handled.update(s.node for s in batch)
            outcomes, blocked = self._execute(batch, batch_number)
            done += outcomes
            if blocked:
                break
            nodes, revisions, update_revision = self.inputs()
            the_plan, _records = self._plan(nodes, revisions, update_revision)
        # What this run did not do: later batches (pending) and the nodes left out, as the last plan says.
        for s in the_plan.steps:
            if s.node in handled:
                continue
            if s.batch:
                done.append(self._entry(s, batch=0, outcome=PENDING,
                                        reason="%s; not started in this run: an earlier batch is not back in "
                                               "service" % s.reason))
            else:
                done.append(self._entry(s))
        return done

    def _execute(self, batch, number):
        upgrade = full_reason(self.prefix, UPGRADE_REASON)
        to_drain = [s.node for s in batch if s.drain]
        if to_drain:
            # Drained first, even when idle: no job may land on a node between the check and the replacement.
            set_state(self.runner, to_drain, "drained", reason=upgrade, prefix=self.prefix)
        # The idle ones at once; then, bounded, the busy ones as their jobs end.
        jobs = read_jobs(self.runner)
        waiting = [s.node for s in batch if s.step != RECHECK and jobs.get(s.node)]
        outcomes = self._restore([s for s in batch if s.node not in waiting], number)
        still_busy, _waited = wait_no_jobs(self.runner, waiting, self.timeout, poll=self.poll, sleep=self.sleep,
                                           clock=self.clock)
        outcomes += self._restore([s for s in batch if s.node in waiting and s.node not in still_busy], number)
        for s in batch:
            if s.node in still_busy:
                out = self._entry(s, number, WAITING, "drained (%s); jobs still run on it after %ss: a later run, "
                                  "or the remediation pass, replaces it once it runs none" % (upgrade, self.timeout))
                out["steps"] = ["drained"] if s.drain else []
                outcomes.append(out)
        self._wait_responding([o["node"] for o in outcomes if o["step"] == RESUMED])
        order = [s.node for s in batch]
        return sorted(outcomes, key=lambda o: order.index(o["node"])), bool(still_busy)

    def _wait_responding(self, resumed):
        """A batch is done when its resumed nodes are back in service: Slurm marks a resumed node NOT_RESPONDING
        until its slurmd answers the next ping, and the next batch's plan counts such a node as out of service.
        Bounded by the remediator's register_timeout; at the timeout the next plan simply counts them out."""
        if not resumed:
            return

        def responding():
            records = read_sinfo(self.runner)
            late = [n for n in resumed if n in records and "NOT_RESPONDING" in records[n].flags]
            return not late, hostlist.compress(late) if late else ""
        try:
            wait.wait_until(responding, "resumed nodes to respond", self.remediator.register_timeout,
                            poll=self.poll, sleep=self.sleep, clock=self.clock,
                            timeout_error=lambda unused: _Late())
        except _Late:
            pass

    def _restore(self, steps, number):
        """Replace (unless only a re-check is owed), wait for the new slurmd, re-check and resume: remediation's own
        steps (Remediator.restore)."""
        if not steps:
            return []
        records = read_sinfo(self.runner)
        upgrade = full_reason(self.prefix, UPGRADE_REASON)
        outcomes, restore = [], []
        for s in steps:
            record = records.get(s.node)
            if record is None:
                self.errors.append("%s: vanished from Slurm during the roll" % s.node)
                outcomes.append(self._entry(s, number, LEFT_DRAINED, "vanished from Slurm during the roll"))
                continue
            if not (record.drain and record.reason == upgrade):
                # someone drained it first (our drain left their reason), or resumed it: not ours to replace now
                outcomes.append(self._entry(s, number, SKIP, "no longer drained for the upgrade (%s%s): left alone"
                                            % (record.state, ": " + record.reason if record.reason else "")))
                continue
            entry = {"name": s.node, "state": record.state, "reason": record.reason, "steps": []}
            restore.append((record, entry, s.step != RECHECK))
            outcomes.append((s, entry))         # its outcome once restored
        # the batch together: replaced at once, waited for at once (Remediator.restore_all)
        errors = len(self.remediator.errors)
        self.remediator.restore_all(restore)
        self.errors += self.remediator.errors[errors:]
        return [self._restored(o[0], number, o[1]) if isinstance(o, tuple) else o for o in outcomes]

    def _restored(self, step, number, entry):
        out = self._entry(step, number, entry["action"], entry["why"])
        out["steps"] = (["drained"] if step.drain else []) + entry["steps"]
        if "topology" in entry:
            out["topology"] = entry["topology"]
        return out
