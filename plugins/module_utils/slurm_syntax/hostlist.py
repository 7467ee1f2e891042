# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm hostlist expressions ("gpu-[0-3,7]", "node[001-010]"): expand them to names and compress names back.

The grammar follows Slurm 22.05 (``scontrol show hostnames`` / ``scontrol show hostlist``):

* a hostlist is a list of expressions separated by commas or whitespace (commas inside brackets
  separate the ranges of that bracket);
* an expression is literal text with zero or more bracketed range lists, ``a[1-2]b[3-4]`` is the
  product of its brackets; nothing may follow the last bracket (Slurm rejects ``a[1-2]b``);
* a range list is comma separated ``N`` or ``N-M`` with ``N <= M`` in decimal digits; the width of
  ``N`` (leading zeros included) is the width every number of that range is printed with, so
  ``node[001-010]`` gives ``node001`` .. ``node010`` and ``n[08-100]`` gives ``n08`` .. ``n100``.

``expand`` keeps the order and the duplicates of the expression, as Slurm does. ``compress`` returns
a canonical form: duplicates removed, names grouped by prefix (in natural order), then by
zero-padding width, numbers ascending.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import re

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

DEFAULT_MAX_HOSTS = 1000000

# Slurm's delimiters; other whitespace (\r, \f, no-break space, ...) is an error rather than part of a name.
_SEPARATORS = frozenset(", \t\n")
_RANGE_RE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_NAME_RE = re.compile(r"^(.*?)([0-9]*)$", re.S)
_DIGITS_RE = re.compile(r"([0-9]+)")


class HostlistError(SoperatorError, ValueError):
    pass


# ---------------------------------------------------------------------------------------------------
# expand


def _split_top_level(expr):
    """Split a hostlist into expressions at commas and whitespace outside brackets; check brackets."""
    tokens = []
    current = []
    depth = 0
    for pos, char in enumerate(expr):
        if char == "[":
            if depth:
                raise HostlistError("nested '[' at position %d in hostlist %r" % (pos, expr))
            depth = 1
        elif char == "]":
            if not depth:
                raise HostlistError("unbalanced ']' at position %d in hostlist %r" % (pos, expr))
            depth = 0
        elif char in _SEPARATORS and not depth:
            if current:
                tokens.append("".join(current))
                current = []
            continue
        elif char.isspace():
            raise HostlistError("%s %r at position %d in hostlist %r"
                                % ("whitespace inside brackets" if depth else "unexpected whitespace character",
                                   char, pos, expr))
        current.append(char)
    if depth:
        raise HostlistError("unclosed '[' in hostlist %r" % (expr,))
    if current:
        tokens.append("".join(current))
    return tokens


def _parse_ranges(body, token):
    """'0-3,7' -> [(lo, hi, width), ...]"""
    if body == "":
        raise HostlistError("empty brackets '[]' in %r" % (token,))
    ranges = []
    for item in body.split(","):
        match = _RANGE_RE.match(item)
        if not match:
            if item == "":
                raise HostlistError("empty range in '[%s]' in %r" % (body, token))
            raise HostlistError("invalid range %r in %r (expected N or N-M with decimal numbers N <= M)"
                                % (item, token))
        lo_text, hi_text = match.groups()
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if lo > hi:
            raise HostlistError("reversed range %r in %r (%d > %d)" % (item, token, lo, hi))
        ranges.append((lo, hi, len(lo_text)))
    return ranges


def _parse_token(token):
    """'a[1-2]b[3]' -> (['a', 'b'], [ranges, ranges]): the text before each bracket and its ranges."""
    texts = []
    brackets = []
    rest = token
    while "[" in rest:
        text, rest = rest.split("[", 1)
        body, rest = rest.split("]", 1)  # _split_top_level guarantees balance
        texts.append(text)
        brackets.append(_parse_ranges(body, token))
    if brackets and rest:
        raise HostlistError("text %r after the last ']' in %r (Slurm 22.05 does not support a suffix after a "
                            "range; list such names one by one)" % (rest, token))
    if not brackets:
        texts.append(rest)
    return texts, brackets


def _bracket_values(ranges):
    for lo, hi, width in ranges:
        for value in range(lo, hi + 1):
            yield "%0*d" % (width, value)


def _count(ranges):
    return sum(hi - lo + 1 for lo, hi, _width in ranges)


def expand(expr, max_hosts=DEFAULT_MAX_HOSTS):
    """Expand a Slurm hostlist expression to the list of host names, in Slurm's order, duplicates kept.

    Raises HostlistError (a ValueError) for malformed or empty expressions and when the expansion would
    have more than ``max_hosts`` names (``None``: no bound).
    """
    if not isinstance(expr, str):
        raise HostlistError("a hostlist must be a string, got %s %r" % (type(expr).__name__, expr))
    if max_hosts is not None and (isinstance(max_hosts, bool) or not isinstance(max_hosts, int) or max_hosts < 1):
        raise HostlistError("max_hosts must be a positive integer or None, got %r" % (max_hosts,))
    parsed = [_parse_token(token) for token in _split_top_level(expr)]
    if not parsed:
        raise HostlistError("empty hostlist %r" % (expr,))

    total = 0
    for _texts, brackets in parsed:
        size = 1
        for ranges in brackets:
            size *= _count(ranges)
        total += size
        if max_hosts is not None and total > max_hosts:
            raise HostlistError("hostlist %r expands to more than %d hosts (max_hosts)" % (expr, max_hosts))

    names = []
    for texts, brackets in parsed:
        if not brackets:
            names.append(texts[0])
            continue
        # Slurm's order: the last bracket varies fastest, then the first, the second, ... (a[1-2]b[3-4]c[5-6] gives
        # a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...); for one or two brackets that is the plain product.
        n = len(brackets)
        loop_order = list(range(n - 2, -1, -1)) + [n - 1]
        for combo in itertools.product(*[list(_bracket_values(brackets[i])) for i in loop_order]):
            digits = [None] * n
            for i, text in zip(loop_order, combo):
                digits[i] = text
            names.append("".join(t + d for t, d in zip(texts, digits)))
    return names


# ---------------------------------------------------------------------------------------------------
# compress


def _natural_key(text):
    parts = _DIGITS_RE.split(text)
    # Even indices are text, odd indices digit runs: positions never mix types, so tuples compare.
    return tuple((int(part), part) if i % 2 else part for i, part in enumerate(parts))


def _check_name(name):
    if not isinstance(name, str):
        raise HostlistError("a host name must be a string, got %s %r" % (type(name).__name__, name))
    if name == "":
        raise HostlistError("empty host name")
    for char in name:
        if char in "[]" or char in _SEPARATORS or char.isspace():
            raise HostlistError("host name %r contains %r; expand hostlist expressions first" % (name, char))


def _split_name(name):
    """'node010' -> ('node', '010'); 'login' -> ('login', '')."""
    return _NAME_RE.match(name).groups()


def _format_range(lo, hi, width):
    if lo == hi:
        return "%0*d" % (width, lo)
    return "%0*d-%0*d" % (width, lo, width, hi)


def _groups(names):
    """Canonical grouping: {prefix: {width: sorted numbers}} and the set of names without a number.

    A number written with leading zeros ("007") has width len("007"); one without ("7", "100") has width 0, unless
    the prefix also has zero-padded numbers of a width W <= its length: then it joins the largest such W, so that
    node[001-100] stays one group (100 printed at width 3 is "100").
    """
    plain = set()
    digits_by_prefix = {}
    for name in names:
        _check_name(name)
        prefix, digits = _split_name(name)
        if digits:
            digits_by_prefix.setdefault(prefix, set()).add(digits)
        else:
            plain.add(prefix)
    groups = {}
    for prefix, all_digits in digits_by_prefix.items():
        padded_widths = sorted(set(len(d) for d in all_digits if len(d) > 1 and d[0] == "0"))
        by_width = {}
        for digits in all_digits:
            if len(digits) > 1 and digits[0] == "0":
                width = len(digits)
            else:
                fitting = [w for w in padded_widths if w <= len(digits)]
                width = fitting[-1] if fitting else 0
            by_width.setdefault(width, []).append(int(digits))
        groups[prefix] = dict((w, sorted(values)) for w, values in by_width.items())
    return plain, groups


def _runs(values):
    start = prev = values[0]
    for value in values[1:]:
        if value != prev + 1:
            yield start, prev
            start = value
        prev = value
    yield start, prev


def compress(names):
    """Compress host names to Slurm's hostlist syntax, canonically: compress(['n2', 'n1', 'n3']) == 'n[1-3]'.

    Duplicates are dropped and the order of ``names`` does not matter. Prefixes are ordered naturally
    ('rack2-' before 'rack10-'), a name without a number before the numbered names of the same prefix, unpadded
    numbers before zero-padded ones, widths apart: ['n01', 'n02', 'n1', 'n2'] gives 'n[1-2,01-02]'.
    An empty list gives ''. Raises HostlistError for names that are not plain host names.
    """
    if isinstance(names, str):
        raise HostlistError("compress() takes a list of host names, not the string %r" % (names,))
    plain, groups = _groups(list(names))
    entries = []
    for prefix in plain:
        entries.append(((_natural_key(prefix), 0), prefix))
    for prefix, by_width in groups.items():
        parts = []
        count = 0
        for width in sorted(by_width):
            for lo, hi in _runs(by_width[width]):
                parts.append(_format_range(lo, hi, width))
                count += hi - lo + 1
        text = prefix + (parts[0] if count == 1 else "[%s]" % ",".join(parts))
        entries.append(((_natural_key(prefix), 1), text))
    entries.sort(key=lambda entry: entry[0])
    return ",".join(text for _key, text in entries)
