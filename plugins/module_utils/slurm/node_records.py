# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Slurm says about nodes, parsed: ``sinfo --json`` (22.05 and later), ``scontrol --oneliner show node`` (FUTURE
nodes too) and ``squeue --format=%N`` into NodeRecord values and job counts. Output we cannot read is an error.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import re
from dataclasses import dataclass, field
from typing import Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmOutputError

_NOT_FOUND = re.compile(r"^Node (\S+) not found$")
_SCONTROL_FIELDS = ("NodeName", "State", "Partitions", "Gres", "GresUsed", "AvailableFeatures", "NodeAddr",
                    "NodeHostName", "CPUTot", "CPUAlloc", "RealMemory", "AllocMem", "SlurmdStartTime")
# One search per key: each begins with a literal the regex engine scans for fast; one regex of all keys tried at
# every position took twice as long over 5,000 nodes (issue 32). Key=value pairs are space-separated, NodeName first.
_SCONTROL_FIELD = tuple((key, re.compile(("^" if key == "NodeName" else " ") + key + r"=(\S*)"))
                        for key in _SCONTROL_FIELDS)
_SCONTROL_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)$")
# What scontrol prints after Reason (src/api/node_info.c, 22.05 to 26.05), each on its own line (a space with
# --oneliner): the reason ends where the first of these begins.
_AFTER_REASON = re.compile(r" (Comment|Extra|InstanceId|InstanceType|ReservationName|TLSCertTokenSet|Topology)=")
_REASON_STAMP = re.compile(r" \[([^\]@]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None)\]"
                           r"(?=$| {8}| (?:Comment|Extra|InstanceId|InstanceType|ReservationName|TLSCertTokenSet|Topology)=)")
_COMMENT_END = re.compile(r" (Extra|InstanceId|InstanceType|ReservationName|TLSCertTokenSet|Topology)=")
# A reason's later lines, with --oneliner: a space and 7 more (node_info.c indents them under "Reason=").
_REASON_LINE = " " * 8


BUSY_STATES = frozenset(["ALLOCATED", "MIXED"])
# Slurm's power saving flags (ephemeral NodeSets) -> our word for them; POWER_DOWN is a requested power-down.
POWER_FLAGS = (("POWERING_UP", "powering_up"), ("POWERING_DOWN", "powering_down"), ("POWER_DOWN", "powering_down"),
               ("POWERED_DOWN", "powered_down"))
HOLD_FLAGS = frozenset(["DRAIN", "FAIL"])


@dataclass
class NodeRecord:
    name: str
    base_state: str                      # IDLE ALLOCATED MIXED DOWN UNKNOWN ERROR FUTURE (uppercase)
    flags: Tuple[str, ...] = ()          # DRAIN COMPLETING NOT_RESPONDING FAIL POWERED_DOWN ...
    reason: str = ""
    reason_set_by_user: Optional[str] = None
    reason_changed_at: Optional[int] = None
    partitions: Tuple[str, ...] = ()
    gres: str = ""
    gres_used: str = ""
    features: Tuple[str, ...] = ()
    cpus: Optional[int] = None
    alloc_cpus: Optional[int] = None
    real_memory: Optional[int] = None
    alloc_memory: Optional[int] = None
    address: str = ""
    hostname: str = ""
    source: str = "sinfo"                # sinfo | scontrol (a FUTURE node sinfo hides)
    jobs: Optional[int] = field(default=None, compare=False)
    # When the node's slurmd last registered (not read for FUTURE nodes): tells a restarted / replaced slurmd from the old one.
    slurmd_start_time: Optional[int] = field(default=None, compare=False)
    # The node's Comment: our power programs leave a resume's request time there (node/power_program.py).
    comment: str = field(default="", compare=False)

    @property
    def drain(self):
        return "DRAIN" in self.flags

    @property
    def busy(self):
        """Jobs (or their epilogs) still hold the node."""
        return self.base_state in BUSY_STATES or "COMPLETING" in self.flags

    @property
    def future(self):
        return self.base_state == "FUTURE"

    @property
    def power(self):
        """Where Slurm's power saving has the node: powering_up, powering_down, powered_down, or "" (up, or a node
        power saving does not manage)."""
        for flag, word in POWER_FLAGS:
            if flag in self.flags:
                return word
        return ""

    @property
    def cloud(self):
        """A CLOUD node: one of an ephemeral NodeSet's powered up and down by Slurm."""
        return "CLOUD" in self.flags

    @property
    def held(self):
        """Out of service by an admin or by Slurm: drained, failed or down."""
        return bool(HOLD_FLAGS.intersection(self.flags)) or self.base_state == "DOWN"

    @property
    def drained(self):
        """DRAINED, not DRAINING: the drain flag is set and no job runs."""
        return self.drain and not self.busy

    @property
    def state(self):
        """The state the way sinfo names it, without the '*' of NOT_RESPONDING (see flags for that)."""
        if self.future:
            return "FUTURE"
        if self.drain:
            return "DRAINING" if self.busy else "DRAINED"
        if "FAIL" in self.flags:
            return "FAILING" if self.busy else "FAIL"
        if "COMPLETING" in self.flags and self.base_state == "IDLE":
            return "COMPLETING"
        return self.base_state

    def ours(self, prefix):
        return bool(prefix) and self.reason.startswith(prefix)

    def snapshot(self):
        return {"state": self.state, "flags": list(self.flags), "reason": self.reason}

    def to_dict(self, prefix=None):
        out = {
            "name": self.name, "state": self.state, "base_state": self.base_state, "flags": list(self.flags),
            "reason": self.reason, "reason_set_by_user": self.reason_set_by_user,
            "reason_changed_at": self.reason_changed_at, "partitions": list(self.partitions), "gres": self.gres,
            "gres_used": self.gres_used, "features": list(self.features), "cpus": self.cpus,
            "alloc_cpus": self.alloc_cpus, "real_memory": self.real_memory, "alloc_memory": self.alloc_memory,
            "address": self.address, "hostname": self.hostname, "drained": self.drained, "busy": self.busy,
            "jobs": self.jobs, "power": self.power,
        }
        if prefix is not None:
            out["ours"] = self.ours(prefix)
        return out


def _number(value, what):
    """22.05 prints plain numbers; 23.02+ prints {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SlurmOutputError("sinfo --json: %s is not a number: %r" % (what, value))
    return int(value)


def _text(value):
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _split_state(state, flags, name):
    """22.05: state "idle" + state_flags ["DRAIN"]; 23.02+: state ["IDLE", "DRAIN"]."""
    if isinstance(state, list):
        if not state or not all(isinstance(s, str) for s in state):
            raise SlurmOutputError("sinfo --json: node %s has an unreadable state %r" % (name, state))
        words = [s.upper() for s in state]
        base, extra = words[0], words[1:]
    elif isinstance(state, str) and state:
        base, extra = state.upper(), []
    else:
        raise SlurmOutputError("sinfo --json: node %s has no state" % name)
    if flags is None:
        flags = []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise SlurmOutputError("sinfo --json: node %s has unreadable state_flags %r" % (name, flags))
    seen = []
    for f in extra + [f.upper() for f in flags]:
        if f not in seen:
            seen.append(f)
    return base, tuple(seen)


def _record_from_json(node):
    if not isinstance(node, dict):
        raise SlurmOutputError("sinfo --json: a node entry is not an object: %r" % (node,))
    name = node.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmOutputError("sinfo --json: a node entry has no name")
    base, flags = _split_state(node.get("state"), node.get("state_flags"), name)
    partitions = node.get("partitions") or []
    if not isinstance(partitions, list):
        raise SlurmOutputError("sinfo --json: node %s has unreadable partitions %r" % (name, partitions))
    features = node.get("features") or ""
    features = features if isinstance(features, list) else [f for f in str(features).split(",") if f]
    user = node.get("reason_set_by_user")
    return NodeRecord(
        name=name, base_state=base, flags=flags, reason=_text(node.get("reason")),
        reason_set_by_user=user if isinstance(user, str) and user else None,
        reason_changed_at=_number(node.get("reason_changed_at"), "reason_changed_at") or None,
        slurmd_start_time=_number(node.get("slurmd_start_time"), "slurmd_start_time") or None,
        comment=_text(node.get("comment")),
        partitions=tuple(str(p) for p in partitions), gres=_text(node.get("gres")),
        gres_used=_text(node.get("gres_used")), features=tuple(features),
        cpus=_number(node.get("cpus"), "cpus"), alloc_cpus=_number(node.get("alloc_cpus"), "alloc_cpus"),
        real_memory=_number(node.get("real_memory"), "real_memory"),
        alloc_memory=_number(node.get("alloc_memory"), "alloc_memory"),
        address=_text(node.get("address")), hostname=_text(node.get("hostname")), source="sinfo")


class SinfoReportedErrors(SlurmOutputError):
    """sinfo --json exits 0 and lists errors (and no nodes) when slurmctld does not answer: never 'no nodes'."""


class SinfoGroupedOutput(SlurmOutputError):
    """sinfo --json of Slurm 23.02 and later lists groups of nodes ('sinfo'), not nodes: the same per-node records
    come from ``scontrol show nodes --json`` there."""


def parse_sinfo_json(text):
    """``sinfo --json`` (22.05) or ``scontrol show nodes --json`` output -> list of NodeRecord (one per node, in
    Slurm's order). Raises SlurmOutputError; SinfoGroupedOutput for a newer sinfo's groups."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        snippet = text.strip()[:200] if text else "(empty)"
        raise SlurmOutputError("sinfo --json printed something that is not JSON (%s): %s" % (e, snippet))
    if not isinstance(doc, dict):
        raise SlurmOutputError("sinfo --json: expected an object, got %s" % type(doc).__name__)
    errors = doc.get("errors") or []
    if errors:
        texts = []
        for err in errors:
            if isinstance(err, dict):
                texts.append("%s (errno %s)" % (err.get("error") or err.get("description") or "?",
                                                err.get("errno", err.get("error_number", "?"))))
            else:
                texts.append(str(err))
        raise SinfoReportedErrors("sinfo --json reported errors: %s" % "; ".join(texts))
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) and isinstance(doc.get("sinfo"), list):
        raise SinfoGroupedOutput("sinfo --json lists groups of nodes ('sinfo'), not nodes")
    if not isinstance(nodes, list):
        raise SlurmOutputError("sinfo --json: no 'nodes' list in the output")
    records, seen = [], set()
    for node in nodes:
        record = _record_from_json(node)
        if record.name not in seen:
            seen.add(record.name)
            records.append(record)
    return records


def parse_scontrol_nodes(text):
    """``scontrol --oneliner [--future] show node`` -> (records, names reported not found). Raises SlurmOutputError."""
    records, missing = [], []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        found = _NOT_FOUND.match(line)
        if found:
            missing.append(found.group(1))
            continue
        if not line.startswith("NodeName="):
            raise SlurmOutputError("scontrol show node printed an unexpected line: %s" % line[:200])
        head, reason, user, changed_at, comment = _scontrol_tail(line)
        # The fields we read never hold spaces; others may (OS=Linux 5.15 ...), their pieces are ignored. The
        # first of a key counts. A search per key, not a split of every word: the exporter parses thousands of
        # these per scrape (issue 32).
        fields = {}
        for key, pattern in _SCONTROL_FIELD:
            found = pattern.search(head)
            if found:
                fields[key] = found.group(1)
        name = fields.get("NodeName")
        state = fields.get("State")
        if not name or not state:
            raise SlurmOutputError("scontrol show node: no NodeName/State in: %s" % line[:200])
        words = state.upper().split("+")
        flags = tuple(w.rstrip("*") for w in words[1:] if w)
        if state.endswith("*") and "NOT_RESPONDING" not in flags:
            flags += ("NOT_RESPONDING",)
        partitions = fields.get("Partitions", "")
        gres = fields.get("Gres", "")
        gres_used = fields.get("GresUsed", "")
        records.append(NodeRecord(
            name=name, base_state=words[0].rstrip("*"), flags=flags, reason=reason, reason_set_by_user=user,
            reason_changed_at=changed_at, comment=comment,
            partitions=tuple(p for p in partitions.split(",") if p),
            gres="" if gres == "(null)" else gres, gres_used="" if gres_used == "(null)" else gres_used,
            cpus=_scontrol_number(fields, "CPUTot", name), alloc_cpus=_scontrol_number(fields, "CPUAlloc", name),
            real_memory=_scontrol_number(fields, "RealMemory", name),
            alloc_memory=_scontrol_number(fields, "AllocMem", name),
            slurmd_start_time=_scontrol_time(fields.get("SlurmdStartTime"), name),
            features=tuple(f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)"),
            address=fields.get("NodeAddr", ""), hostname=fields.get("NodeHostName", ""), source="scontrol"))
    return records, missing


def _scontrol_tail(line):
    """(the line before its Reason, the reason (its lines joined by newlines), who set it, when (UNIX time), the
    Comment) of one ``scontrol --oneliner show node`` line. A reason ends at its ' [user@time]' stamp where that is
    followed by the line's end or a key scontrol prints after the reason; a reason without a stamp ends at the first
    such key (so one holding ' Comment=' is cut there)."""
    reason, user, changed_at, comment = "", None, None, ""
    cut = line.find(" Reason=")
    if cut >= 0:
        head, rest = line[:cut], line[cut + len(" Reason="):]
        stamp = _REASON_STAMP.search(rest)
        if stamp:
            reason, user = rest[:stamp.start()], stamp.group(1) or None
            changed_at = _scontrol_time(stamp.group(2), "reason")
            rest = rest[stamp.end():]
            after = _AFTER_REASON.search(rest)
            more, rest = (rest[:after.start()], rest[after.start():]) if after else (rest, "")
            if more.startswith(_REASON_LINE):
                reason += "\n" + "\n".join(more[len(_REASON_LINE):].split(_REASON_LINE))
        else:
            after = _AFTER_REASON.search(rest)
            reason, rest = (rest[:after.start()], rest[after.start():]) if after else (rest, "")
    else:
        after = _AFTER_REASON.search(line)
        head, rest = (line[:after.start()], line[after.start():]) if after else (line, "")
    if rest.startswith(" Comment="):
        comment = rest[len(" Comment="):]
        end = _COMMENT_END.search(comment)
        comment = comment[:end.start()] if end else comment
    return head, reason, user, changed_at, comment


def _scontrol_number(fields, key, name):
    value = fields.get(key)
    if value is None or value in ("N/A", "n/a"):
        return None
    try:
        return int(value)
    except ValueError:
        raise SlurmOutputError("scontrol show node: %s of node %s is not a number: %r" % (key, name, value[:50]))


def _scontrol_time(value, name):
    """A time as scontrol prints it under TZ=UTC0 (slurm/runner.py SLURM_TZ): 2026-11-27T09:20:27 -> UNIX time;
    None, Unknown and 0 -> None."""
    if value is None or value in ("None", "Unknown", "0"):
        return None
    match = _SCONTROL_TIME.match(value)     # not time.strptime: 10 times slower, thousands of nodes a scrape
    try:
        return calendar.timegm(tuple(int(n) for n in match.groups()) + (0, 0, 0)) if match else _unreadable_time()
    except ValueError:
        raise SlurmOutputError("scontrol show node: an unreadable time for %s: %r" % (name, value[:50]))


def _unreadable_time():
    raise ValueError("not YYYY-MM-DDTHH:MM:SS")


def parse_squeue_nodes(text):
    """``squeue --format=%N`` (one hostlist per job) -> {node: jobs}."""
    counts = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            names = hostlist.expand(line)
        except hostlist.HostlistError as e:
            raise SlurmOutputError("squeue printed a node list we cannot read (%s): %s" % (e, line[:200]))
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts
