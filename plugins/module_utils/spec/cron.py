# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cron schedules as a Kubernetes CronJob takes them, checked before anything is applied.

The API server parses `spec.schedule` with robfig/cron v3 `ParseStandard`: a descriptor (@hourly, ...) or five
fields (minute hour day-of-month month day-of-week), each a comma-separated list of `*`, `?`, `N` or `N-M`, each
optionally `/STEP`; months and weekdays also by English three-letter names. We accept a subset of what it accepts
(never more): no `@every`, no `TZ=`/`CRON_TZ=` (Kubernetes refuses those in the schedule), no signs or empty list
items, single spaces or tabs between fields.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import Optional

DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# The CRD's pattern: the shape only (descriptor or five fields); the ranges are checked by schedule_problem.
SCHEDULE_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^ \t]+([ \t]+[^ \t]+){4})$"

_MONTHS = dict((name, i + 1) for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")))
_DAYS = dict((name, i) for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat")))
# (name, min, max, names) of the five fields, as robfig/cron bounds them (day-of-week 0-6: 7 is refused).
FIELDS = (("minute", 0, 59, None), ("hour", 0, 23, None), ("day of month", 1, 31, None),
          ("month", 1, 12, _MONTHS), ("day of week", 0, 6, _DAYS))
_NUMBER = re.compile(r"[0-9]{1,9}\Z")


def _value(text, names):
    if names is not None and text.lower() in names:
        return names[text.lower()]
    if _NUMBER.match(text):
        return int(text)
    return None


def _field_problem(field, name, low, high, names):
    for item in field.split(","):
        if not item:
            return "the %s field %r has an empty list item" % (name, field)
        parts = item.split("/")
        if len(parts) > 2:
            return "the %s field item %r has more than one '/'" % (name, item)
        bounds = parts[0].split("-")
        if len(bounds) > 2:
            return "the %s field item %r has more than one '-'" % (name, item)
        if bounds[0] in ("*", "?"):
            if len(bounds) > 1:
                return "the %s field item %r: '%s' cannot start a range" % (name, item, bounds[0])
            start, end = low, high
        else:
            values = [_value(b, names) for b in bounds]
            if None in values:
                wanted = "a number" if names is None else "a number or a name (%s)" % ", ".join(
                    n.capitalize() for n in sorted(names, key=names.get))
                return "the %s field item %r is not %s" % (name, item, wanted)
            start, end = values[0], values[-1]
            if len(parts) == 2 and len(bounds) == 1:
                end = high              # N/STEP means N-max/STEP
        if start < low or end > high:
            return "the %s field item %r is out of range (%d-%d)" % (name, item, low, high)
        if start > end:
            return "the %s field item %r starts after it ends" % (name, item)
        if len(parts) == 2:
            step = _value(parts[1], None)
            if step is None or step == 0:
                return "the %s field item %r needs a step of 1 or more" % (name, item)
    return None


def schedule_problem(schedule: object) -> Optional[str]:
    """Why Kubernetes (robfig/cron ParseStandard) would refuse `schedule`, or None."""
    if not isinstance(schedule, str):
        return None                     # the type check reports it
    if schedule.startswith("@"):
        if schedule in DESCRIPTORS:
            return None
        return "%r is not a cron schedule (descriptors: %s)" % (schedule, ", ".join(DESCRIPTORS))
    if "TZ" in schedule:
        return "%r: Kubernetes refuses TZ or CRON_TZ in a schedule" % (schedule,)
    fields = re.split(r"[ \t]+", schedule)
    if len(fields) != 5 or not all(fields):
        return "%r is not a cron schedule (five fields: minute hour day-of-month month day-of-week, " \
               "separated by spaces)" % (schedule,)
    for field, (name, low, high, names) in zip(fields, FIELDS):
        problem = _field_problem(field, name, low, high, names)
        if problem:
            return "%r is not a cron schedule: %s" % (schedule, problem)
    return None
