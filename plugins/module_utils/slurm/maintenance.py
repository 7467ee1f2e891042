# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scheduled rolling upgrades (NodeSet ``spec.updateStrategy.type: scheduled``): the Slurm-aware roll of
slurm/rollout.py, run only inside a maintenance window, with a Slurm maintenance reservation ahead of it.

Before the window opens, the outdated workers (their pod's revision is not the StatefulSet's update revision) are
put in a reservation ``soperator-upgrade-<NodeSet>`` with ``Flags=MAINT`` from the window's start to its end. The
scheduler itself then starts no job there that would still run at the start (backfill fills the gap with jobs that
end in time); Slurm's own accounting marks the time as maintenance. ``IGNORE_JOBS`` is added when a reserved worker
runs a job as the reservation is made or grows (Slurm refuses the reservation otherwise, "Requested nodes are
busy"): such a job is never killed, the roll waits for it inside the window.

Inside the window each run (site.yml, or the remediation CronJob's pass) rolls the workers as slurmAware does, its
wait bounded by the window's end too; the reservation then shrinks to the workers still outdated and is deleted
once none is. After the window nothing more is started: the outdated workers are reported, Slurm ends the
reservation at its end time, and a worker the roll already drained is finished by the remediation pass as usual.

Times are UTC on both sides: Slurm's clients read and print times in their own zone, and the runner gives every
Slurm command TZ=UTC0 (slurm/runner.py).

We act only on our reservation: its name, with the MAINT flag and Users=root as we make it. One of that name that
is not so is an error, never changed or deleted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
from dataclasses import dataclass
from typing import Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import read_jobs, read_sinfo
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.rollout import SKIP, outdated
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmCommandError, SlurmOutputError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.window import parse_utc_text, utc_text

RESERVATION_PREFIX = "soperator-upgrade-"
RESERVATION_USER = "root"       # a reservation needs users or accounts; root runs where it must anyway
SHOW = ("scontrol", "--oneliner", "show", "reservation")
NO_RESERVATIONS = "No reservations in the system"

# The step of an outdated worker before its window opens (reported; the roll's own steps: slurm/rollout.py).
SCHEDULED = "scheduled"
# What a run did (would do, in check mode) to the reservation.
CREATED, UPDATED, REMOVED, UNCHANGED, ABSENT = "created", "updated", "removed", "unchanged", "absent"
BEFORE, OPEN, OVER = "before", "open", "over"


def reservation_name(node_set):
    return RESERVATION_PREFIX + node_set


@dataclass
class Reservation:
    name: str
    start: int              # seconds since the epoch
    end: int
    nodes: Tuple[str, ...]
    flags: Tuple[str, ...]
    users: str
    state: str              # ACTIVE | INACTIVE

    @property
    def ours(self):
        return "MAINT" in self.flags and self.users == RESERVATION_USER

    def to_dict(self):
        return {"name": self.name, "start": utc_text(self.start) + "Z", "end": utc_text(self.end) + "Z",
                "nodes": hostlist.compress(list(self.nodes)), "flags": list(self.flags), "state": self.state}


def parse_reservations(text):
    """`scontrol --oneliner show reservation` under TZ=UTC0 -> {name: Reservation}. Output we cannot read is an
    error (we would otherwise create a second reservation over the first)."""
    found = {}
    if text.strip() == NO_RESERVATIONS:
        return found
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = {}
        for word in line.split():
            if "=" in word:
                key, value = word.split("=", 1)
                fields[key] = value
        try:
            name = fields["ReservationName"]
            nodes = fields.get("Nodes") or ""
            found[name] = Reservation(
                name=name, start=parse_utc_text(fields["StartTime"]), end=parse_utc_text(fields["EndTime"]),
                nodes=tuple(hostlist.expand(nodes)) if nodes and nodes != "(null)" else (),
                flags=tuple(f for f in (fields.get("Flags") or "").split(",") if f and f != "(null)"),
                users=fields.get("Users") or "", state=fields.get("State") or "")
        except (KeyError, ValueError) as e:
            raise SlurmOutputError("scontrol show reservation: cannot read %r: %s" % (line[:200], e))
    return found


def read_reservations(runner):
    return runner.run(list(SHOW), parse=lambda r: parse_reservations(r.stdout))[1]


def window_phase(now, start, end):
    if now < start:
        return BEFORE
    return OPEN if now < end else OVER


def reservation_commands(name, existing, nodes, busy, start, end, now):
    """The scontrol commands that make our reservation `name` cover `nodes` (already sorted) for the window, and
    what they do: (action, [argv, ...]). `busy`: the nodes among them that run a job now. Raises SlurmCommandError
    for a reservation of that name that is not ours."""
    if existing is not None and not existing.ours:
        raise SlurmCommandError(
            "reservation %s exists and is not ours (flags %s, users %s; ours has MAINT and Users=%s): it is left "
            "alone - rename or delete it, or use another updateStrategy" % (
                name, ",".join(existing.flags) or "none", existing.users or "none", RESERVATION_USER))
    if not nodes:
        if existing is None:
            return ABSENT, []
        return REMOVED, [["scontrol", "delete", "reservation", name]]
    hosts = hostlist.compress(list(nodes))
    ignore_jobs = bool(set(busy) & set(nodes))   # Slurm refuses busy nodes otherwise; their jobs run on
    if existing is None:
        flags = "MAINT,IGNORE_JOBS" if ignore_jobs else "MAINT"
        # an open window starts now: a start in the past (even by a second) is refused
        begin = "now" if now >= start else utc_text(start)
        return CREATED, [["scontrol", "create", "reservation", "ReservationName=%s" % name, "StartTime=%s" % begin,
                          "EndTime=%s" % utc_text(end), "Nodes=%s" % hosts, "Flags=%s" % flags,
                          "Users=%s" % RESERVATION_USER]]
    commands = []
    update = ["scontrol", "update", "reservation", "ReservationName=%s" % name]
    times = []
    if existing.state != "ACTIVE":
        # an active one keeps its start (Slurm cannot move it); an inactive one follows the window, and starts now
        # when the window opened before it would
        if now < start and existing.start != start:
            times.append("StartTime=%s" % utc_text(start))
        elif now >= start and existing.start > now:
            times.append("StartTime=now")
    if existing.end != end:
        times.append("EndTime=%s" % utc_text(end))
    if times:
        commands.append(update + times)
    if set(nodes) != set(existing.nodes):
        commands.append(update + ["Nodes=%s" % hosts])
    if commands and ignore_jobs and "IGNORE_JOBS" not in existing.flags:
        # first: Slurm refuses to move or grow a reservation over a running job otherwise
        commands.insert(0, update + ["Flags+=IGNORE_JOBS"])
    return (UPDATED if commands else UNCHANGED), commands


class ScheduledRollout(object):
    """The roll of one NodeSet with a maintenance window: the reservation, then (inside the window) slurm/rollout's
    Rollout, whose inputs() it shares. run(first) -> (rollout steps, the reservation's entry)."""

    def __init__(self, runner, rollout, node_set, window_start, window_end, check_mode=False, now=time.time):
        self.runner = runner
        self.rollout = rollout
        self.node_set = node_set
        self.name = reservation_name(node_set)
        self.start, self.end = window_start, window_end
        self.check_mode = check_mode
        self.now = now

    def _entry(self, action, commands, nodes=(), existing=None):
        entry = {"node_set": self.node_set, "reservation": self.name, "action": action,
                 "window": {"start": utc_text(self.start) + "Z", "end": utc_text(self.end) + "Z"},
                 "nodes": hostlist.compress(list(nodes)) if nodes else "",
                 "commands": [" ".join(argv) for argv in commands]}
        if existing is not None:
            entry["before"] = existing.to_dict()
        return entry

    def _ensure(self, nodes, busy):
        """Make the reservation cover `nodes` (none: delete it); -> its entry."""
        existing = read_reservations(self.runner).get(self.name)
        action, commands = reservation_commands(self.name, existing, sorted(nodes), busy, self.start, self.end,
                                                self.now())
        if not self.check_mode:
            for argv in commands:
                self.runner.run(argv)
        return self._entry(action, commands, nodes, existing)

    def run(self, first=None):
        """`first`: what the rollout's inputs() would say now, when the caller has just read it."""
        first = first or self.rollout.inputs()
        behind = outdated(*first)
        phase = window_phase(self.now(), self.start, self.end)
        window = "the maintenance window %sZ to %sZ" % (utc_text(self.start), utc_text(self.end))
        if not behind:
            # every worker current: the reservation (if a run before left it) goes
            entry = self._ensure([], [])
            return [], None if entry["action"] == ABSENT else entry
        if phase == OVER:
            # nothing more is started; Slurm ends the reservation at its end time by itself
            return [{"node": n, "node_set": self.node_set, "batch": 0, "step": SKIP,
                     "reason": "%s is over: set a new window to roll it" % window} for n in behind], None
        records = read_sinfo(self.runner)
        jobs = read_jobs(self.runner)
        # a reservation holds only nodes slurmctld knows: one not registered yet gets the new template when it comes
        reserve = [n for n in behind if n in records and not records[n].future]
        busy = [n for n in reserve if jobs.get(n) or records[n].busy]
        entry = self._ensure(reserve, busy)
        if phase == BEFORE:
            steps = []
            for n in behind:
                why = ("in reservation %s (MAINT) for %s: Slurm starts no job on it that would still run then; "
                       "replaced inside the window" % (self.name, window)) if n in reserve else \
                    "its slurmd is not registered in Slurm: not reserved"
                steps.append({"node": n, "node_set": self.node_set, "batch": 0,
                              "step": SCHEDULED if n in reserve else SKIP, "reason": why})
            return steps, entry
        # inside the window: the roll, waiting no longer than the window lasts
        self.rollout.timeout = max(0, min(self.rollout.timeout, self.end - self.now()))
        steps = self.rollout.run(first)
        if self.check_mode:
            return steps, entry
        left = outdated(*self.rollout.inputs())
        after = self._ensure([n for n in reserve if n in left], busy)
        if after["action"] != UNCHANGED:
            entry = dict(after, action=REMOVED if after["action"] == REMOVED else UPDATED,
                         commands=entry["commands"] + after["commands"])
        return steps, entry


def acted(entry):
    """Did (would, in check mode) this reservation entry change Slurm?"""
    return bool(entry) and entry["action"] in (CREATED, UPDATED, REMOVED)
