# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Slurm says about nodes, parsed: ``sinfo --json`` (22.05 and later), ``scontrol --oneliner show node`` (FUTURE
nodes too) and ``squeue --format=%N`` into NodeRecord values and job counts. Output we cannot read is an error.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from dataclasses import dataclass, field
from typing import Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmOutputError

_NOT_FOUND = re.compile(r"^Node (\S+) not found$")
_SCONTROL_FIELDS = frozenset(["NodeName", "State", "Partitions", "Gres", "AvailableFeatures", "NodeAddr",
                              "NodeHostName"])
_REASON = re.compile(r"^(.*?)(?: \[([^\]@]*)@([^\]]*)\])?$", re.S)


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
    # When the node's slurmd last registered (sinfo only): tells a restarted / replaced slurmd from the old one.
    slurmd_start_time: Optional[int] = field(default=None, compare=False)
    # The node's Comment (sinfo only): our power programs leave a resume's request time there (node/power_program.py).
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
        reason = ""
        user = None
        head = line
        cut = line.find(" Reason=")
        if cut >= 0:
            head, reason_text = line[:cut], line[cut + len(" Reason="):]
            match = _REASON.match(reason_text)
            reason, user = match.group(1), match.group(2) or None
        # The fields we read never hold spaces; others may (OS=Linux 5.15 ...), their pieces are ignored.
        fields = {}
        for word in head.split():
            key, sep, value = word.partition("=")
            if sep and key in _SCONTROL_FIELDS and key not in fields:
                fields[key] = value
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
        records.append(NodeRecord(
            name=name, base_state=words[0].rstrip("*"), flags=flags, reason=reason, reason_set_by_user=user,
            partitions=tuple(p for p in partitions.split(",") if p),
            gres="" if gres == "(null)" else gres,
            features=tuple(f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)"),
            address=fields.get("NodeAddr", ""), hostname=fields.get("NodeHostName", ""), source="scontrol"))
    return records, missing


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
