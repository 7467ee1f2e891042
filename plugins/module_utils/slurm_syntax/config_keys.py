# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which keys Slurm reads on a line of its config files, and whether it reads a value as that key's value.

The keys and the types their parser converts come from Slurm's own parser tables (config_keys_data.py, written by
tools/slurm_config_keys.py); a key is allowed when any supported release reads it, and `read_by` says whether the
target's release does. Slurm's keys are case-insensitive, so every lookup is by the lower-case key.

Values are checked as Slurm parses them, but stricter where Slurm is lax in ways that change the value: numbers are
read by strtoul(value, 0) (`010` is 8, `0x10` is 16), so only plain decimals are taken; enumerations Slurm matches by
prefix (State=UPPER reads as UP) are taken only as whole words. Keys whose value a plugin parses later stay text
(config_syntax still checks that the file reads them back as written).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_keys_data import KEYS, RELEASES
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import value_problem

# The line types of the spec's free-form maps: what a message calls them.
LINE_NAMES = {
    "slurm.conf": "slurm.conf",
    "partition": "a partition line of slurm.conf (PartitionName=...)",
    "cgroup.conf": "cgroup.conf",
    "mpi.conf": "mpi.conf (the PMIx plugin's options)",
}

_UINT_MAX = {"uint16": 2 ** 16 - 1, "uint32": 2 ** 32 - 1, "uint64": 2 ** 64 - 1}
_DECIMAL = re.compile(r"(0|[1-9][0-9]*)([kK]?)\Z")
_SIGNED = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?\Z")
_FLT_MIN, _FLT_MAX = 1.1754943508222875e-38, 3.4028234663852886e+38      # strtof sets ERANGE outside them
_INFINITE = ("infinite", "unlimited")
_TRUE, _FALSE = ("yes", "up", "true", "1"), ("no", "down", "false", "0")
# time_str2secs (src/common/parse_time.c): min, min:sec, hr:min:sec, days-hr, days-hr:min, days-hr:min:sec.
_TIME = re.compile(r"(?:([0-9]{1,9})-([0-9]{1,9})(?::([0-9]{1,9})(?::([0-9]{1,9}))?)?"
                   r"|([0-9]{1,9})(?::([0-9]{1,9})(?::([0-9]{1,9}))?)?)\Z")
_INT_MAX = 2 ** 31 - 1
_SHARE = re.compile(r"(yes|force)(?::(0|[1-9][0-9]{0,8}))?\Z", re.I)
_SHARE_MAX = 0x7fff                 # the count shares a uint16 with the FORCE bit


def version_text(version):
    return "%d.%02d" % tuple(version)


def entry(line_type, key):
    """(spelling, type, first release, last release) of `key` on `line_type`, or None when no release reads it."""
    return KEYS[line_type].get(key.lower())


def read_by(line_type, key, version):
    """Whether the Slurm release `version` reads `key` on `line_type` (False also for unknown keys). A release
    outside the table's range is taken as its nearest end: a newer Slurm is assumed to read what the newest known
    one reads, rather than to read nothing."""
    found = entry(line_type, key)
    version = min(max(tuple(version), RELEASES[0]), RELEASES[-1])
    return bool(found) and found[2] <= version <= found[3]


def unknown_key_problem(line_type, key):
    """Why no supported Slurm reads `key` on `line_type`, or None."""
    if entry(line_type, key):
        return None
    close = difflib.get_close_matches(key.lower(), list(KEYS[line_type]), n=1)
    hint = " (did you mean %s?)" % KEYS[line_type][close[0]][0] if close else ""
    return "is not a key of %s in Slurm %s to %s%s" % (
        LINE_NAMES[line_type], version_text(RELEASES[0]), version_text(RELEASES[-1]), hint)


def _or_infinite(check):
    """A value check that also takes INFINITE or UNLIMITED (any case), as Slurm's number and time parsers do."""
    def checked(text, kind):
        return None if text.lower() in _INFINITE else check(text, kind)
    return checked


@_or_infinite
def _uint(text, kind):
    match = _DECIMAL.match(text)
    if not match:
        return "is not a whole number (digits only, no leading zero, or INFINITE)"
    if match.group(2) and kind == "uint16":
        return "is not a whole number (digits only, no suffix)"
    number = int(match.group(1)) * (1024 if match.group(2) else 1)
    if number > _UINT_MAX[kind]:
        return "is more than Slurm reads here (at most %d)" % _UINT_MAX[kind]
    return None


@_or_infinite
def _long(text, _kind):
    if not _SIGNED.match(text):
        return "is not a whole number (digits, an optional '-', no leading zero)"
    if abs(int(text)) > 2 ** 63 - 1:
        return "is out of range (a 64-bit number)"
    return None


@_or_infinite
def _float(text, _kind):
    if not _FLOAT.match(text):
        return "is not a decimal number (like 98.5)"
    number = abs(float(text))
    if number and not _FLT_MIN <= number <= _FLT_MAX:
        return "is out of the range Slurm reads (a 32-bit float)"
    return None


def _boolean(text, _kind):
    if text.lower() in _TRUE + _FALSE:
        return None
    return "is not a boolean (YES or NO; Slurm also reads true/false, up/down and 1/0)"


@_or_infinite
def _time(text, _kind):
    """A time limit as time_str2mins reads it, within its int."""
    match = _TIME.match(text)
    if not match:
        return "is not a time limit (minutes, minutes:seconds, hours:minutes:seconds, days-hours, " \
               "days-hours:minutes, days-hours:minutes:seconds, or UNLIMITED)"
    d, h, m, s, minutes, seconds, more = [int(g) if g else 0 for g in match.groups()]
    if match.group(5) is not None:
        if match.group(7) is not None:           # hours:minutes:seconds
            h, m, s = minutes, seconds, more
        else:                                    # minutes[:seconds]
            m, s = minutes, seconds
    for part in (d * 86400, h * 3600, m * 60, s, d * 86400 + h * 3600 + m * 60 + s + 59):
        if part > _INT_MAX:
            return "is longer than Slurm reads (at most %d seconds)" % (_INT_MAX - 59)
    return None


def _enum(words):
    def check(text, _kind):
        if text.lower() in [w.lower() for w in words]:
            return None
        return "must be one of %s" % ", ".join(words)
    return check


def _oversubscribe(text, _kind):
    """OverSubscribe/Shared of a partition: NO, EXCLUSIVE, YES[:count] (count >= 2) or FORCE[:count] (>= 1)."""
    if text.lower() in ("no", "exclusive"):
        return None
    match = _SHARE.match(text)
    if match and (match.group(2) is None or
                  (2 if match.group(1).lower() == "yes" else 1) <= int(match.group(2)) <= _SHARE_MAX):
        return None
    return "must be NO, EXCLUSIVE, YES, YES:<count> (2 to %d), FORCE or FORCE:<count> (1 to %d)" \
           % (_SHARE_MAX, _SHARE_MAX)


_BY_TYPE = {"uint16": _uint, "uint32": _uint, "uint64": _uint, "long": _long, "float": _float,
            "boolean": _boolean}
# String keys whose value Slurm's config reader itself parses (read_config.c), checked as it does.
_STRING_VALUES = {
    "partition": {
        "maxtime": _time,
        "defaulttime": _time,
        "state": _enum(("UP", "DOWN", "DRAIN", "INACTIVE")),
        "oversubscribe": _oversubscribe,
        "shared": _oversubscribe,
    },
}


# Numbers below which slurm.conf's reader refuses the file (MaxJobCount, FirstJobId) or silently puts its own value
# in (the others): _validate_and_set_defaults in src/common/read_config.c.
_MINIMUM = {"slurm.conf": {"maxjobcount": 1, "firstjobid": 1, "minjobage": 2, "schedulertimeslice": 5,
                           "treewidth": 1}}


def _below_minimum(line_type, key, text):
    minimum = _MINIMUM.get(line_type, {}).get(key.lower())
    match = _DECIMAL.match(text)
    if minimum is None or not match:
        return None
    if int(match.group(1)) * (1024 if match.group(2) else 1) < minimum:
        return "is less than Slurm takes for %s (at least %d)" % (key, minimum)
    return None


def value_type_problem(line_type, key, value):
    """Why Slurm would not read `value` as the value of the known `key` on `line_type`, or None (also for keys it
    reads as text, and unknown keys)."""
    found = entry(line_type, key)
    if found is None:
        return None
    check = _STRING_VALUES.get(line_type, {}).get(key.lower()) or _BY_TYPE.get(found[1])
    if check is None:
        return None
    problem = check(str(value), found[1]) or _below_minimum(line_type, key, str(value))
    return "%r %s" % (value, problem) if problem else None


def map_problems(line_type, config, owned=None):
    """[(key, message)] for every key of a free-form map of `line_type` that Slurm would not read as written: keys
    we own (`owned`: {lower-case key: what sets it}), keys that differ only in case, keys no supported release reads
    on that line, and values of known keys that do not parse as their type. Every key is reported, not only the
    first."""
    problems, seen = [], {}
    for key in config:
        if not isinstance(key, str):
            continue
        low = key.lower()
        if low in seen:
            problems.append((key, "is the same key as %r (Slurm's keys are case-insensitive): keep one of them"
                             % seen[low]))
            continue
        seen[low] = key
        owner = (owned or {}).get(low)
        if owner:
            problems.append((key, "is managed by soperator.slurm (set it through %s)" % owner))
            continue
        problem = unknown_key_problem(line_type, key)
        if problem:
            problems.append((key, problem))
            continue
        value = config[key]
        if isinstance(value, (int, str)) and not isinstance(value, bool) and not value_problem(value):
            problem = value_type_problem(line_type, key, value)
            if problem:
                problems.append((key, problem))
    return problems
