# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staggered worker start (issue 32): a scale-up of the workers' StatefulSets in steps, so that no more than
`spec.workers.maxStartingPods` worker pods of the cluster are asked for and not Ready at once (spec/workers.py says
why the bound and its default).

A StatefulSet's pods asked for and not Ready are its spec.replicas less its status.readyReplicas (pods not made yet
count: they are coming): one list of the cluster's StatefulSets tells it for every NodeSet, so each poll is one
request whatever the worker count, and no pod is read. A step raises the StatefulSets that grow, in NodeSet order,
as far as the room (the bound less what is not Ready yet, over all NodeSets) allows; the next step waits until the
step's pods are Ready and there is room again. Check mode reports the steps from the same function, as if each step
became Ready before the next (what the real run does while nothing else changes). Scale-down and unchanged replicas
are not touched (scale-down is Slurm-aware: slurm/removal.py, before any apply). The pods Slurm powers up for an
ephemeral NodeSet are no StatefulSet's: Slurm's ResumeRate paces them; its StatefulSet's always-up floor counts
like any other.

An interrupted run leaves a StatefulSet between steps (its applied digest is the step's, so the next run sees a
change) and the next run continues from the live replicas.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import (
    BackendError, _replicas, observed, wait_for)
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import WORKER

GROWING = (ka.CREATE, ka.UPDATE, ka.RECREATE)


def not_ready(replicas, ready):
    return max(0, replicas - ready)


def next_step(sets, targets, bound):
    """The next step of a scale-up: name -> the replicas it sets, for the StatefulSets of `targets` ([(name,
    replicas wanted)], in order) that can grow now. `sets` is name -> (replicas, ready replicas) of every worker
    StatefulSet of the cluster as it is (a new one: (0, 0)); `bound` the pods that may be asked for and not Ready at
    once (0: no bound). {} when every target is reached, or when nothing is Ready enough to leave room."""
    room = None
    if bound:
        room = bound - sum(not_ready(replicas, ready) for replicas, ready in sets.values())
    step = {}
    for name, target in targets:
        replicas = sets.get(name, (0, 0))[0]
        if replicas >= target or (room is not None and room <= 0):
            continue
        new = target if room is None else min(target, replicas + room)
        step[name] = new
        if room is not None:
            room -= new - replicas
    return step


def reached(sets, targets):
    return all(sets.get(name, (0, 0))[0] >= target for name, target in targets)


def plan_steps(sets, targets, bound):
    """Every step from `sets` to `targets`, each step's pods Ready before the next (and, where others' pods left no
    room, those Ready too: what the real run waits for)."""
    state = dict(sets)
    steps = []
    while not reached(state, targets):
        step = next_step(state, targets, bound)
        if not step:
            state = dict((name, (replicas, max(replicas, ready))) for name, (replicas, ready) in state.items())
            step = next_step(state, targets, bound)
        for name, replicas in step.items():
            state[name] = (replicas, replicas)
        steps.append(step)
    return steps


def worker_sets(statefulsets):
    """name -> (spec.replicas, status.readyReplicas) of the worker StatefulSets among `statefulsets`."""
    out = {}
    for sts in statefulsets:
        meta = sts.get("metadata") or {}
        if (meta.get("labels") or {}).get(c.LABEL_COMPONENT) != WORKER:
            continue
        out[meta["name"]] = (_replicas(sts), int((sts.get("status") or {}).get("readyReplicas") or 0))
    return out


def with_replicas(obj, replicas):
    out = copy.deepcopy(obj)
    out["spec"]["replicas"] = replicas
    return out


class ScaleUp(object):
    """One run's staggered scale-up of the worker StatefulSets its `changes` grow. plan() before the apply: it
    returns the changes to apply, the growing StatefulSets held at the first step; run() after it: the other steps,
    each waited for (up to `timeout`), the last one applying the planned object itself (its digest: a re-run sees
    it unchanged). `steps` is what was (check mode: would be) done."""

    def __init__(self, client, namespace, selector, bound, timeout, check_mode=False, force_conflicts=True,
                 poll=2.0, sleep=None, clock=None):
        self.client = client
        self.namespace = namespace
        self.selector = selector          # our labels: one list of the cluster's StatefulSets per poll
        self.bound = bound
        self.timeout = timeout
        self.check_mode = check_mode
        self.force_conflicts = force_conflicts
        self.poll = poll
        self.sleep = sleep
        self.clock = clock
        self.targets = []
        self.staggered = {}               # name -> the planned Change of a StatefulSet raised in steps
        self.steps = []

    def plan(self, changes, live_statefulsets):
        """`changes`: this run's planned changes; `live_statefulsets`: every StatefulSet of the cluster as read at
        the run's start. -> the changes to apply now."""
        if not self.bound:
            return changes
        sets = worker_sets(live_statefulsets)
        growing = [ch for ch in changes if ch.kind == "StatefulSet" and ch.action in GROWING
                   and ((ch.desired or {}).get("metadata") or {}).get("labels", {}).get(c.LABEL_COMPONENT) == WORKER
                   and _replicas(ch.desired) > sets.get(ch.name, (0, 0))[0]]
        self.targets = [(ch.name, _replicas(ch.desired)) for ch in growing]
        first = next_step(sets, self.targets, self.bound)
        if reached(dict(sets, **dict((name, (n, n)) for name, n in first.items())), self.targets):
            self.targets = []
            return changes                # the room holds the whole scale-up: one apply, as without a bound
        self.staggered = dict((ch.name, ch) for ch in growing)
        if self.check_mode:
            # the dry run applies the final replicas: the diff shows them
            self.steps = plan_steps(sets, self.targets, self.bound)
            return changes
        self.steps = [first] if first else []     # no room yet: the template is applied, the replicas wait
        out = []
        for ch in changes:
            if ch.name in self.staggered and ch.kind == "StatefulSet":
                held = copy.copy(ch)
                held.desired = with_replicas(ch.desired, first.get(ch.name, sets.get(ch.name, (0, 0))[0]))
                out.append(held)
            else:
                out.append(ch)
        return out

    def after_apply(self, applied):
        """Copy the server's answers of the held changes back to the planned ones."""
        for ch in applied:
            if ch.kind == "StatefulSet" and ch.name in self.staggered and ch is not self.staggered[ch.name]:
                self.staggered[ch.name].after = ch.after

    def run(self):
        """The steps after the first, each once the one before is Ready and there is room. -> seconds waited."""
        if self.check_mode or not self.staggered:
            return 0.0
        waited = 0.0
        while True:
            found = {}
            probe = self._probe(self.steps[-1] if self.steps else {}, found)
            kw = dict((k, v) for k, v in (("sleep", self.sleep), ("clock", self.clock)) if v is not None)
            waited += wait_for(probe, "step %d of the workers' scale-up to be Ready" % len(self.steps),
                               self.timeout, poll=self.poll, timeout_error=self._timed_out, **kw)
            if reached(found["sets"], self.targets):
                return waited
            step = next_step(found["sets"], self.targets, self.bound)
            for name, replicas in sorted(step.items()):
                planned = self.staggered[name]
                obj = planned.desired if replicas == _replicas(planned.desired) else \
                    with_replicas(planned.desired, replicas)
                try:
                    planned.after, _created = self.client.apply(ka.with_digest(obj), force=self.force_conflicts)
                except KubeError as e:
                    raise BackendError("scaling StatefulSet %s/%s up to %d (step %d): %s; a re-run continues from "
                                       "the live replicas" % (self.namespace, name, replicas, len(self.steps) + 1, e))
            self.steps.append(step)

    def _probe(self, last, found):
        """wait_for's probe: one list of the StatefulSets (kept in found["sets"]); true once the step `last` is
        Ready and there is room for the next (or none is needed)."""
        def probe():
            statefulsets = self.client.list("StatefulSet", self.namespace, self.selector)
            sets = found["sets"] = worker_sets(statefulsets)
            by_name = dict((s["metadata"]["name"], s) for s in statefulsets)
            waiting = ["%s %d/%d ready" % (name, sets.get(name, (0, 0))[1], replicas)
                       for name, replicas in sorted(last.items())
                       if name not in sets or not observed(by_name[name]) or sets[name][1] < replicas]
            if waiting:
                return False, "step %d: %s" % (len(self.steps), ", ".join(waiting))
            if reached(sets, self.targets) or next_step(sets, self.targets, self.bound):
                return True, ""
            return False, "room for no worker: %d asked for and not Ready (bound %d)" % (
                sum(not_ready(r, ready) for r, ready in sets.values()), self.bound)
        return probe

    def _timed_out(self, text):
        return BackendError("timed out after %ds waiting for the workers' scale-up (spec.workers.maxStartingPods %d) "
                            "after %d step(s); not ready: %s. A re-run continues from the live replicas"
                            % (self.timeout, self.bound, len(self.steps), text))

    def report(self):
        """The result's `scale_up`: None when no StatefulSet was raised in steps."""
        if not self.staggered:
            return None
        return {"max_starting_pods": self.bound, "targets": dict(self.targets), "steps": [dict(s) for s in self.steps],
                "step_count": len(self.steps)}
