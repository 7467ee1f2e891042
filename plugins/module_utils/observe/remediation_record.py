# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation record: what the remediation passes did, kept between runs for the Prometheus exporter (another
process, observe/status.py). One JSON document, the same for both backends:

    {"version": 1,
     "lastRun": {"time": UNIX_SECONDS, "success": true | false, "errors": N, "nodes": {OUTCOME: N}},
     "lastSuccessTime": UNIX_SECONDS,                       absent until a pass succeeds
     "runs": {"success": N, "failure": N},
     "actions": {"replace" | "recheck" | "resume": {"success": N, "failure": N}}}

OUTCOME is a node's action in the pass (slurm/remediation.py ACTIONS: replaced, resumed, left-drained,
skipped-foreign, ...). A pass fails when a node's remediation failed (its `errors`) or the pass could not run at all.
Counters only grow; a lost record starts them again from 0, which Prometheus' rate() takes as a counter reset.
A pass in check mode records nothing.

Where it lives (one place per backend, written by the remediation, read by the exporter):
- locally: <state_dir>/status/remediation.json, replaced by a rename (never written through a link);
- Kubernetes: the key remediation.json of the ConfigMap <name>-remediation-status (rendered with the cluster when
  remediation is on; the remediation run writes the key with server-side apply under its own field manager, so the
  reconcile never takes it back), which the exporter's pod mounts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat

from ansible_collections.soperator.slurm.plugins.module_utils import files

VERSION = 1
RECORD_KEY = "remediation.json"
STEPS = ("replace", "recheck", "resume")
RESULTS = ("success", "failure")
MAX_BYTES = 1 << 20


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _time(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def parse(text):
    """A record from its JSON text, every field checked (a wrong one counts as absent): the same dict shape as
    updated() returns, or None when the text is no record."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    runs = data.get("runs") if isinstance(data.get("runs"), dict) else {}
    actions = data.get("actions") if isinstance(data.get("actions"), dict) else {}
    out = {"version": VERSION, "runs": dict((r, _count(runs.get(r))) for r in RESULTS), "actions": {}}
    for step in STEPS:
        counts = actions.get(step) if isinstance(actions.get(step), dict) else {}
        out["actions"][step] = dict((r, _count(counts.get(r))) for r in RESULTS)
    last = data.get("lastRun")
    if isinstance(last, dict) and _time(last.get("time")) and isinstance(last.get("success"), bool):
        nodes = last.get("nodes") if isinstance(last.get("nodes"), dict) else {}
        out["lastRun"] = {"time": _time(last["time"]), "success": last["success"], "errors": _count(last.get("errors")),
                          "nodes": dict((str(k), _count(v)) for k, v in nodes.items())}
    if _time(data.get("lastSuccessTime")):
        out["lastSuccessTime"] = _time(data["lastSuccessTime"])
    return out


def updated(previous, result, now, success=None):
    """The record after one pass: `previous` (a parse() result, or None) plus the pass' module result (its
    `actions`, `nodes` and `errors`). `success` defaults to "no node's remediation failed"."""
    record = previous or parse(json.dumps({"version": VERSION}))
    record = json.loads(json.dumps(record))          # a copy
    ok = not result.get("errors") if success is None else success
    record["runs"]["success" if ok else "failure"] += 1
    for step, counts in (result.get("actions") or {}).items():
        if step in record["actions"]:
            for res in RESULTS:
                record["actions"][step][res] += _count((counts or {}).get(res))
    outcomes = {}
    for node in result.get("nodes") or []:
        if node.get("action"):
            outcomes[node["action"]] = outcomes.get(node["action"], 0) + 1
    record["lastRun"] = {"time": round(now, 3), "success": ok, "errors": len(result.get("errors") or []),
                         "nodes": outcomes}
    if ok:
        record["lastSuccessTime"] = round(now, 3)
    return record


def dumps(record):
    return json.dumps(record, sort_keys=True, indent=1) + "\n"


def read_file(path, follow=False):
    """The record in the file at `path`, or None when there is none (missing, not a regular file, no record).
    `follow` reads through symlinks (the exporter's view of the mounted ConfigMap, whose keys are links); never
    for a file we write."""
    if not follow:
        try:
            data = files.read_regular(path, limit=MAX_BYTES)
        except files.UnsafeFile:
            return None
        return None if data is None else parse(data.decode("utf-8", "replace"))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return parse(os.read(fd, MAX_BYTES + 1).decode("utf-8", "replace"))
    finally:
        os.close(fd)


class FileStore(object):
    """The record as a file of ours (local backend: <state_dir>/status/remediation.json)."""

    def __init__(self, path):
        self.path = path

    def load(self):
        return read_file(self.path)

    def save(self, record):
        directory = os.path.dirname(self.path)
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            pass
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError("%s is not a directory of ours: the remediation record is not written" % directory)
        files.atomic_write(self.path, dumps(record), 0o644)
