# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance window of a NodeSet's ``updateStrategy`` (type ``scheduled``): its start, an RFC 3339 time with
its offset (``2026-11-28T02:00:00Z``, ``2026-11-28T03:00:00+01:00``), read into seconds since the epoch. A time
without an offset is refused: slurmctld, the runner and the user may each be in another time zone."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import re
import time
from typing import Optional

START_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?(Z|[+-][0-9]{2}:[0-9]{2})$"
START_HELP = "is not an RFC 3339 time with its offset, like 2026-11-28T02:00:00Z or 2026-11-28T03:00:00+01:00"
_START = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?(Z|([+-])(\d{2}):(\d{2}))$")


def parse_start(text: str) -> int:
    """-> seconds since the epoch; ValueError (saying why) for anything else than a valid RFC 3339 time."""
    found = _START.match(text or "")
    if not found:
        raise ValueError(START_HELP)
    year, month, day, hour, minute = (int(found.group(i)) for i in range(1, 6))
    second = int(found.group(6) or 0)
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1] and hour < 24 and minute < 60
            and second < 60):
        raise ValueError("is not a valid date and time")
    offset = 0
    if found.group(7) != "Z":
        if int(found.group(9)) > 23 or int(found.group(10)) > 59:
            raise ValueError("has an invalid offset")
        offset = (int(found.group(9)) * 60 + int(found.group(10))) * 60
        offset = offset if found.group(8) == "+" else -offset
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) - offset


def start_problem(text: str) -> Optional[str]:
    """A field check: None, or why `text` is no window start (its pattern, START_PATTERN, reports the format)."""
    if not _START.match(text or ""):
        return None
    try:
        parse_start(text)
    except ValueError as e:
        return "%r %s" % (text, e)
    return None


def utc_text(epoch: float) -> str:
    """A time as Slurm reads and prints it under TZ=UTC0 (slurm/runner.py SLURM_TZ): 2026-11-28T02:00:00."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def parse_utc_text(text: str) -> int:
    """The inverse of utc_text (a reservation's StartTime/EndTime read back); ValueError otherwise."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
