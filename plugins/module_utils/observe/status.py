# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the exporter reads besides Slurm: the status records the health checks leave (node/health_status.py,
write_status: passive/<node>.json, active/<check>.json under the status directory) and the remediation record
(observe/remediation_record.py). Reading only; a file that is missing, too large, not a regular file or not a record
is skipped and counted, never fatal to a scrape. Every name that becomes a label is checked here (node and check
names as the spec allows them), and the exporter keeps only the nodes Slurm lists.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat
from collections import namedtuple

from ansible_collections.soperator.slurm.plugins.module_utils.node import health_status
from ansible_collections.soperator.slurm.plugins.module_utils.observe import remediation_record as rr

# One check's last result on one node: kind passive / active, passed True / False, time in UNIX seconds.
HealthResult = namedtuple("HealthResult", "kind node check passed time")
# A bound on the files one scrape reads (a passive record per node, an active one per check).
MAX_FILES = 20000
_RESULTS = {"pass": True, "fail": False}


def _read_json(directory, entry):
    """The JSON object in directory/entry (not through a link, not a fifo, at most STATUS_MAX_BYTES), or None."""
    try:
        fd = os.open(os.path.join(directory, entry), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > health_status.STATUS_MAX_BYTES:
            return None
        data = json.loads(os.read(fd, health_status.STATUS_MAX_BYTES + 1).decode("utf-8", "replace"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _time(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _records(status_dir, kind):
    """[(name, record or None)] of the files of one kind, in name order, at most MAX_FILES."""
    directory = os.path.join(status_dir, kind)
    try:
        entries = sorted(e for e in os.listdir(directory) if e.endswith(".json") and not e.startswith("."))
    except OSError:
        return []
    return [(entry[:-5], _read_json(directory, entry)) for entry in entries[:MAX_FILES]]


def _valid(name):
    return isinstance(name, str) and bool(health_status.STATUS_NAME.match(name))


def read_health(status_dir):
    """([HealthResult], number of files skipped) from a status directory."""
    results, skipped = [], 0
    for node, record in _records(status_dir, health_status.PASSIVE):
        checks = (record or {}).get("checks")
        when = _time((record or {}).get("time"))
        if not record or record.get("version") != health_status.STATUS_VERSION or record.get("node") != node or \
                not _valid(node) or not isinstance(checks, dict) or when is None:
            skipped += 1
            continue
        for check, outcome in sorted(checks.items()):
            if _valid(check) and isinstance(outcome, dict) and outcome.get("result") in _RESULTS:
                results.append(HealthResult(health_status.PASSIVE, node, check, _RESULTS[outcome["result"]], when))
    for check, record in _records(status_dir, health_status.ACTIVE):
        nodes = (record or {}).get("nodes")
        if not record or record.get("version") != health_status.STATUS_VERSION or record.get("check") != check or \
                not _valid(check) or not isinstance(nodes, dict):
            skipped += 1
            continue
        for node, outcome in sorted(nodes.items()):
            when = _time(outcome.get("time")) if isinstance(outcome, dict) else None
            if _valid(node) and when is not None and outcome.get("result") in _RESULTS:
                results.append(HealthResult(health_status.ACTIVE, node, check, _RESULTS[outcome["result"]], when))
    return results, skipped


def read_remediation(path):
    """The remediation record at `path` (followed through links: on Kubernetes it is a mounted ConfigMap's key), or
    None."""
    return rr.read_file(path, follow=True)
