# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm node state: parse ``sinfo --json``, plan drain / resume / undrain, apply it with one ``scontrol update`` per
distinct action, verify, and wait for drains to finish.

Rules (see the slurm_drain module documentation, which states them for users):

* Every drain we set carries the reason prefix (``soperator:`` by default). A node held by someone else (drained,
  failed or down with a reason that lacks our prefix) is never resumed, undrained or re-drained unless ``force``;
  it is reported in ``skipped`` with its reason.
* A node that Slurm does not know, a controller that does not answer, or output we cannot parse is an error. We never
  report a state we did not read back from slurmctld after the change (fail closed).
* State is read with one ``sinfo --json`` per read (the plan, each round of a wait). ``sinfo`` hides FUTURE nodes
  (defined in slurm.conf, not running: soperator defines every possible node of a NodeSet that way), so names missing
  from it are looked up once with ``scontrol --future show node`` to tell "FUTURE" from "does not exist". After the
  updates, the changed nodes (only those) are read back with one ``scontrol --future show node <hostlist>``: it shows
  FUTURE nodes too and takes a third of the time of ``sinfo --json`` for 1,000 nodes.
* FUTURE nodes are an error unless ``force``: draining or resuming something that is not running is almost always a
  wrong hostlist. With ``force`` a drain sets the DRAIN flag (the node registers drained), and resumed / undrained
  clear it with UNDRAIN; never RESUME, which in Slurm 22.05 turns a FUTURE node into IDLE+NOT_RESPONDING.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
from dataclasses import dataclass
from typing import Optional

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import (
    HOLD_FLAGS, NodeRecord, SinfoGroupedOutput, SinfoReportedErrors, parse_scontrol_nodes, parse_sinfo_json,
    parse_squeue_nodes)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    SlurmCommandError, SlurmError, SlurmOutputError, TransientError, format_command)
from ansible_collections.soperator.slurm.plugins.module_utils.wait import wait_until

DEFAULT_REASON_PREFIX = "soperator:"
# The reason (after the prefix) of a node drained because its NodeSet shrinks; both backends use it.
SCALE_DOWN_REASON = "scale-down"
# The reason of a node drained by a rolling upgrade (slurm/rollout.py) until it runs no job.
UPGRADE_REASON = "upgrade"
# The reason our ResumeFailProgram gives a node whose worker did not come up within ResumeTimeout (ephemeral NodeSets).
RESUME_FAILED_REASON = "resume-failed"
# The node Comment our ResumeProgram leaves, "<prefix> resume-requested <UNIX time>": when Slurm asked for the node.
RESUME_REQUESTED = "resume-requested"
STATES = ("drained", "resumed", "undrained")

SINFO_JSON = ("sinfo", "--json")
# Slurm >= 23.02: sinfo --json lists groups of nodes; scontrol's JSON has the per-node records 22.05's sinfo had.
SCONTROL_NODES_JSON = ("scontrol", "show", "nodes", "--json")
SCONTROL_FUTURE = ("scontrol", "--oneliner", "--future", "show", "node")
SCONTROL_NODES = ("scontrol", "--oneliner", "show", "node")
# CONFIGURING: a job whose nodes are booting holds them already; a node under it is not idle.
SQUEUE_NODES = ("squeue", "--noheader", "--all", "--states=RUNNING,COMPLETING,SUSPENDED,CONFIGURING", "--format=%N")

# Actions and the scontrol State= they use.
DRAIN, RESUME, UNDRAIN = "drain", "resume", "undrain"
NONE, SKIP = "none", "skipped"
_SCONTROL_STATE = {DRAIN: "DRAIN", RESUME: "RESUME", UNDRAIN: "UNDRAIN"}


# ---------------------------------------------------------------------------------------------------------------------
# Reading


def check_nodes_option(nodes, optional=False):
    """The `nodes` option of slurm_drain / slurm_node_info: a hostlist expression or a list of them (None when
    `optional`). Raises SlurmCommandError otherwise."""
    if nodes is None and optional:
        return
    if isinstance(nodes, str) or (isinstance(nodes, (list, tuple)) and all(isinstance(n, str) for n in nodes)):
        return
    raise SlurmCommandError("nodes must be a hostlist expression or a list of them")


def expand_nodes(nodes):
    """``nodes`` option (a hostlist expression, or a list of them) -> distinct names in order."""
    if nodes is None:
        return []
    items = [nodes] if isinstance(nodes, str) else list(nodes)
    names, seen = [], set()
    for item in items:
        if not isinstance(item, str):
            raise SlurmCommandError("nodes: %r is not a hostlist expression" % (item,))
        try:
            expanded = hostlist.expand(item)
        except hostlist.HostlistError as e:
            raise SlurmCommandError("nodes: %s" % e)
        for name in expanded:
            if name not in seen:
                seen.add(name)
                names.append(name)
    return names


def _parse_sinfo_result(result):
    try:
        return parse_sinfo_json(result.stdout)
    except SinfoReportedErrors as e:
        raise TransientError(str(e))
    except SlurmOutputError:
        if result.rc != 0:
            # e.g. a client that cannot read its config: say what Slurm said, not that JSON was missing.
            raise SlurmCommandError("%s failed (rc=%s): %s" % (result.cmd, result.rc,
                                                               (result.stderr or result.stdout).strip()[:500]))
        raise


def read_sinfo(runner):
    """Every node sinfo shows (FUTURE nodes hidden), by name, in Slurm's order: one ``sinfo --json`` (22.05), or one
    ``scontrol show nodes --json`` where sinfo's JSON lists groups of nodes (23.02+); the runner remembers which."""
    try:
        _result, records = runner.run(SCONTROL_NODES_JSON if runner.nodes_by_scontrol else SINFO_JSON,
                                      parse=_parse_sinfo_result, check=False)
    except SinfoGroupedOutput:
        runner.nodes_by_scontrol = True
        _result, records = runner.run(SCONTROL_NODES_JSON, parse=_parse_sinfo_result, check=False)
    return dict((r.name, r) for r in records)


def _parse_scontrol_result(result):
    records, missing = parse_scontrol_nodes(result.stdout)
    if result.rc != 0 and not missing:
        raise SlurmCommandError("%s failed (rc=%s): %s" % (result.cmd, result.rc,
                                                           (result.stderr or result.stdout).strip()[:500]))
    return records, missing


def read_scontrol(runner, names=None):
    """One ``scontrol --oneliner --future show node [names]``: FUTURE nodes too (sinfo hides them), and the names
    Slurm does not know. Used to classify names sinfo did not list and to read back the nodes we just changed."""
    argv = list(SCONTROL_FUTURE)
    if names:
        argv.append(hostlist.compress(names))
    _result, (records, missing) = runner.run(argv, parse=_parse_scontrol_result, check=False)
    return dict((r.name, r) for r in records), missing


def read_node_table(runner):
    """Every node sinfo shows (FUTURE nodes hidden), by name, from one ``scontrol --oneliner show node``: for the
    exporter, whose scrape must stay short at thousands of nodes (issue 32: 22.05's ``sinfo --json`` took 3 s for
    5,000 nodes, this 0.2 s). What decides a drain or a resume reads sinfo's JSON (read_sinfo): a reason holding one
    of the keys scontrol prints after it is cut there in this text."""
    _result, (records, _missing) = runner.run(SCONTROL_NODES, parse=_parse_scontrol_result, check=False)
    return dict((r.name, r) for r in records)


def read_nodes(runner, names=None, include_future=False):
    """Records of ``names`` (all nodes sinfo shows when None). Raises SlurmCommandError for names Slurm lacks."""
    by_name = read_sinfo(runner)
    if names is None:
        if include_future:
            hidden, _missing = read_scontrol(runner)
            for name, record in hidden.items():
                if name not in by_name and record.future:
                    by_name[name] = record
        return by_name
    absent = [n for n in names if n not in by_name]
    if absent:
        hidden, _missing = read_scontrol(runner, absent)
        unknown = [n for n in absent if n not in hidden]
        if unknown:
            raise SlurmCommandError("%d node(s) do not exist in Slurm: %s" % (len(unknown), hostlist.compress(unknown)),
                                    runner.commands, unknown=unknown)
        by_name.update(hidden)
    return dict((n, by_name[n]) for n in names)


def read_jobs(runner):
    """Running/completing/suspended/configuring jobs per node, from one squeue call."""
    _result, counts = runner.run(SQUEUE_NODES, parse=lambda r: parse_squeue_nodes(r.stdout))
    return counts


def wait_no_jobs(runner, nodes, timeout, poll=2.0, sleep=time.sleep, clock=time.monotonic):
    """Poll squeue (one per round, bounded by `timeout` seconds) until none of `nodes` runs a job -> (the nodes still
    running jobs at the timeout, [] when all are free; seconds waited). Node removal and rolling upgrades wait so."""
    state = {"busy": list(nodes)}

    class StillBusy(Exception):
        pass

    def free():
        jobs = read_jobs(runner)
        state["busy"] = [n for n in nodes if jobs.get(n)]
        return not state["busy"], hostlist.compress(state["busy"]) if state["busy"] else ""

    if not nodes:
        return [], 0.0
    started = clock()
    try:
        waited = wait_until(free, "jobs to end on %s" % hostlist.compress(nodes), timeout, poll=poll, sleep=sleep,
                            clock=clock, timeout_error=lambda unused: StillBusy())
    except StillBusy:
        return list(state["busy"]), clock() - started
    return [], waited


# ---------------------------------------------------------------------------------------------------------------------
# Planning


def _check_reason_text(option, text):
    """A reason is one line of printable text: slurmctld stores a line break or another control character as it is,
    and `scontrol show node` then splits the reason over lines, so the read-back of the drain could never match;
    a NUL cannot be passed in an argument at all."""
    bad = sorted(set(ch for ch in text if ord(ch) < 0x20 or ord(ch) == 0x7f))
    if bad:
        raise SlurmCommandError("%s must be one line of printable text; it holds %s" % (
            option, ", ".join("%r" % ch for ch in bad)))


def full_reason(prefix, reason):
    """The reason we set: ``<prefix> <reason>`` (kept as is when it already starts with the prefix)."""
    if not prefix or not prefix.strip():
        raise SlurmCommandError("reason_prefix must not be empty: it is how our drains are told from others'")
    _check_reason_text("reason_prefix", prefix)
    _check_reason_text("reason", reason or "")
    reason = (reason or "").strip()
    if not reason:
        raise SlurmCommandError("a drain needs a reason")
    if reason.startswith(prefix):
        return reason
    return prefix + ("" if prefix.endswith(" ") else " ") + reason


def update_nodes_argv(names, state, reason=None):
    """The one builder of `scontrol update NodeName=... State=... [Reason=...]` (state: DRAIN, RESUME, FUTURE...)."""
    argv = ["scontrol", "update", "NodeName=%s" % hostlist.compress(names), "State=%s" % state]
    if reason is not None:
        argv.append("Reason=%s" % reason)
    return argv


@dataclass
class Action:
    verb: str
    names: list
    reason: Optional[str] = None

    @property
    def argv(self):
        return update_nodes_argv(self.names, _SCONTROL_STATE[self.verb], self.reason if self.verb == DRAIN else None)


@dataclass
class Plan:
    state: str
    reason: Optional[str]
    node_actions: dict                  # name -> drain | resume | undrain | none | skipped
    actions: list                       # Action, one per distinct (verb, reason)
    skipped: list                       # {name, state, reason, why}
    errors: list                        # messages: nothing may run when there is one


def _plan_node(record, state, reason, prefix, force):
    """(action, why) for one node; why explains a skip or an error ('error: ...')."""
    foreign = record.held and not record.ours(prefix)
    if record.future and not force:
        return "future", None
    if state == "drained":
        if record.drain and record.ours(prefix) and record.reason == reason:
            return NONE, None
        if foreign and not force:
            return SKIP, "held by someone else (%s): its reason lacks %r; force=true overrides" % (
                record.state, prefix)
        return DRAIN, None
    if record.future:
        # force: clear the flag only; RESUME would take the node out of FUTURE.
        if not record.drain:
            return NONE, None
        if foreign and not force:
            return SKIP, "held by someone else"
        return UNDRAIN, None
    if state == "resumed":
        if not record.held:
            return NONE, None
        if foreign and not force:
            return SKIP, "held by someone else (%s): its reason lacks %r; force=true overrides" % (
                record.state, prefix)
        return RESUME, None
    # undrained
    if not record.drain:
        return NONE, None
    if foreign and not force:
        return SKIP, "drained by someone else: its reason lacks %r; force=true overrides" % prefix
    return UNDRAIN, None


def plan(records, names, state, reason, prefix, force):
    """Decide what to do with each of ``names`` (all present in ``records``)."""
    if state not in STATES:
        raise SlurmCommandError("state must be one of %s" % ", ".join(STATES))
    node_actions, skipped, errors, future = {}, [], [], []
    groups = {}
    for name in names:
        record = records[name]
        action, why = _plan_node(record, state, reason, prefix, force)
        if action == "future":
            future.append(name)
            continue
        node_actions[name] = action
        if action == SKIP:
            skipped.append({"name": name, "state": record.state, "reason": record.reason, "why": why})
        elif action != NONE:
            key = (action, reason if action == DRAIN else None)
            groups.setdefault(key, []).append(name)
    if future:
        errors.append("%d node(s) are FUTURE (defined in slurm.conf but not running): %s; force=true changes them "
                      "anyway" % (len(future), hostlist.compress(future)))
    order = {DRAIN: 0, UNDRAIN: 1, RESUME: 2}
    actions = [Action(verb, group, why)
               for (verb, why), group in sorted(groups.items(), key=lambda kv: order[kv[0][0]])]
    return Plan(state, reason, node_actions, actions, skipped, errors)


def predict(record, action, reason):
    """What the node will look like after ``action`` (check mode)."""
    flags = list(record.flags)
    base = record.base_state
    new_reason = record.reason
    if action == DRAIN:
        if "DRAIN" not in flags:
            flags.append("DRAIN")
        new_reason = reason
    elif action == UNDRAIN:
        flags = [f for f in flags if f != "DRAIN"]
        new_reason = "" if base != "DOWN" else record.reason
    elif action == RESUME:
        flags = [f for f in flags if f not in HOLD_FLAGS]
        if base == "DOWN":
            base = "IDLE"
        new_reason = ""
    else:
        return record
    return NodeRecord(**dict(record.__dict__, base_state=base, flags=tuple(flags), reason=new_reason))


def reached(record, action, reason):
    """Did the node get where ``action`` was to take it?"""
    if action == DRAIN:
        return record.drain and record.reason == reason
    if action == UNDRAIN:
        return not record.drain
    if action == RESUME:
        return not record.held
    return True


# ---------------------------------------------------------------------------------------------------------------------
# Doing


def _describe(snapshot):
    text = snapshot["state"]
    if "NOT_RESPONDING" in snapshot["flags"]:
        text += "*"
    if snapshot["reason"]:
        text += " (%s)" % snapshot["reason"]
    return text


def _diff(nodes):
    lines_before, lines_after = [], []
    for entry in nodes:
        b, a = entry["before"], entry["after"]
        if b != a:
            lines_before.append("%s: %s\n" % (entry["name"], _describe(b)))
            lines_after.append("%s: %s\n" % (entry["name"], _describe(a)))
    return {"before_header": "slurm nodes", "after_header": "slurm nodes",
            "before": "".join(lines_before), "after": "".join(lines_after)}


def _queries(runner, since):
    return [r.cmd for r in runner.history[since:] if r.argv[:2] != ["scontrol", "update"]]


class SetStateResult(dict):
    pass


def set_state(runner, nodes, state, reason=None, prefix=DEFAULT_REASON_PREFIX, force=False, wait=False,
              timeout=300, wait_sleep=2.0, check_mode=False, sleep=time.sleep, clock=time.monotonic):
    """Drive ``nodes`` to ``state``; return the module result (without ``failed``). Raises SlurmError, with the
    partial result in ``error.details['result']``."""
    started = len(runner.history)
    names = expand_nodes(nodes)
    if not names:
        raise SlurmCommandError("nodes is empty")
    if not prefix or not prefix.strip():
        raise SlurmCommandError("reason_prefix must not be empty: it is how our drains are told from others'")
    _check_reason_text("reason_prefix", prefix)
    wanted_reason = full_reason(prefix, reason) if state == "drained" else None
    if timeout is not None and timeout < 0:
        raise SlurmCommandError("timeout must be >= 0")

    before = read_nodes(runner, names)
    the_plan = plan(before, names, state, wanted_reason, prefix, force)
    if the_plan.errors:
        raise SlurmCommandError("refusing to change any node: " + "; ".join(the_plan.errors), runner.commands,
                                result={"nodes": [dict({"name": n}, before=before[n].snapshot()) for n in names]})

    updates = []
    warnings = []
    if check_mode:
        after = dict((n, predict(before[n], the_plan.node_actions[n], wanted_reason)) for n in names)
        updates = [format_command(a.argv) for a in the_plan.actions]
    else:
        failures = []
        for action in the_plan.actions:
            try:
                result = runner.run(action.argv, check=False)[0]
            except SlurmError as e:
                e.msg = "%s (commands already run: %s)" % (e.msg, "; ".join(updates) or "none")
                e.args = (e.msg,)
                e.details["result"] = _partial(names, before, the_plan, updates, runner, started, warnings)
                raise
            updates.append(result.cmd)
            if result.rc != 0:
                failures.append((action, result))
        after = before
        if the_plan.actions:
            after = dict(before)
            after.update(_read_back(runner, [n for a in the_plan.actions for n in a.names]))
            for action, result in failures:
                missed = [n for n in action.names if not reached(after[n], action.verb, action.reason)]
                message = (result.stderr or result.stdout).strip()
                if missed:
                    raise SlurmCommandError(
                        "%s failed (rc=%s): %s; not in the requested state: %s"
                        % (result.cmd, result.rc, message, hostlist.compress(missed)), runner.commands,
                        result=_partial(names, before, the_plan, updates, runner, started, warnings, after))
                warnings.append("%s exited %s (%s) but every node reached the requested state (Slurm 22.05 answers "
                                "so for nodes whose slurmd never registered)" % (result.cmd, result.rc, message))
            missed = [n for a in the_plan.actions for n in a.names if not reached(after[n], a.verb, a.reason)]
            if missed:
                raise SlurmCommandError(
                    "slurmctld accepted the update but these nodes are not in the requested state: %s"
                    % ", ".join("%s is %s" % (n, _describe(after[n].snapshot())) for n in missed),
                    runner.commands,
                    result=_partial(names, before, the_plan, updates, runner, started, warnings, after))
        if wait and state in ("drained", "resumed"):
            after = _wait(runner, state, names, the_plan, after, timeout, wait_sleep, sleep, clock,
                          lambda current: _partial(names, before, the_plan, updates, runner, started, warnings,
                                                   current))

    result = _partial(names, before, the_plan, updates, runner, started, warnings, after)
    return result


def _read_back(runner, changed):
    """Read back the nodes we changed, and only those: one ``scontrol --future show node <hostlist>`` (FUTURE nodes
    included; a third of the time of sinfo --json for 1,000 nodes). Untouched nodes keep the state read before."""
    records, _missing = read_scontrol(runner, changed)
    gone = [n for n in changed if n not in records]
    if gone:
        raise SlurmCommandError("nodes disappeared from Slurm during the change: %s" % hostlist.compress(gone),
                                runner.commands)
    return records


def _wait(runner, state, names, the_plan, current, timeout, wait_sleep, sleep, clock, partial):
    """Poll (one sinfo --json per round) until the nodes are all the way there: drained -> no job runs on them
    (DRAINED, not DRAINING); resumed -> slurmd answers (Slurm marks a resumed node NOT_RESPONDING until its next
    ping). Skipped and FUTURE nodes are not waited for."""
    wanted = (DRAIN, NONE) if state == "drained" else (RESUME, NONE)
    targets = [n for n in names if the_plan.node_actions[n] in wanted and not current[n].future]
    if state == "drained":
        what = "DRAINED; still DRAINING (jobs running)"
    else:
        what = "in service; slurmd not responding"
    pending, first = [], True

    def probe():
        nonlocal current, pending, first
        if not first:
            visible = read_sinfo(runner)
            missing = [n for n in targets if n not in visible]
            if missing:
                raise SlurmCommandError("nodes vanished from sinfo while waiting: %s" % hostlist.compress(missing),
                                        runner.commands, result=partial(current))
            current = dict(current)
            for n in targets:
                current[n] = visible[n]
        first = False
        if state == "drained":
            lost = [n for n in targets if not current[n].drain]
            pending = [n for n in targets if current[n].busy]
        else:
            lost = [n for n in targets if current[n].held]
            pending = [n for n in targets if "NOT_RESPONDING" in current[n].flags]
        if lost:
            raise SlurmCommandError("while waiting, someone else changed these nodes: %s"
                                    % ", ".join("%s is %s" % (n, _describe(current[n].snapshot())) for n in lost),
                                    runner.commands, result=partial(current))
        return not pending, hostlist.compress(pending) if pending else ""

    def timed_out(_missing):
        return SlurmCommandError(
            "timed out after %ss waiting for %d node(s) to be %s: %s"
            % (timeout, len(pending), what, hostlist.compress(pending)), runner.commands, result=partial(current))

    wait_until(probe, what, timeout or 0, poll=wait_sleep, sleep=sleep, clock=clock, timeout_error=timed_out)
    return current


def _partial(names, before, the_plan, updates, runner, started, warnings, after=None):
    nodes = []
    for name in names:
        entry = {"name": name, "action": the_plan.node_actions.get(name, NONE), "before": before[name].snapshot()}
        if after is not None:
            entry["after"] = after[name].snapshot()
        nodes.append(entry)
    changed = bool(the_plan.actions)
    result = {
        "changed": changed,
        "nodes": nodes,
        "skipped_nodes": the_plan.skipped,
        "commands": updates,
        "queries": _queries(runner, started),
        "reason": the_plan.reason,
        "warnings": list(warnings),
    }
    if after is not None:
        result["diff"] = _diff(nodes)
    return result


def node_info(runner, nodes=None, jobs=True, include_future=False, prefix=DEFAULT_REASON_PREFIX):
    """Records for slurm_node_info: every node (or ``nodes``), with the jobs count from squeue."""
    names = expand_nodes(nodes) if nodes else None
    if nodes is not None and not names:
        raise SlurmCommandError("nodes is empty")
    records = read_nodes(runner, names, include_future=include_future)
    counts = read_jobs(runner) if jobs else {}
    out = []
    for name, record in records.items():
        entry = record.to_dict(prefix)
        if jobs:
            entry["jobs"] = counts.get(name, 0)
        out.append(entry)
    return out
