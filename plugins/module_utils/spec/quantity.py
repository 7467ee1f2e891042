# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes resource quantities ("1600Gi", "500m", "1e3") as exact numbers, and the units Slurm wants."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from decimal import (Context, Decimal, DecimalException, InvalidOperation, Overflow, ROUND_CEILING, ROUND_FLOOR,
                     Underflow, localcontext)
from typing import Union

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

# The grammar of resource.Quantity: a signed decimal number and an optional binary, decimal or exponent suffix.
# (Kubernetes reads an exponent as a whole number: "1e1.5" is refused by the API server, so here too.)
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$")
_QUANTITY_RE = re.compile(QUANTITY_PATTERN[:-1] + r"\Z")
_EXPONENT_RE = re.compile(r"[0-9.]+[eE]([+-]?[0-9]+)\Z")
# The suffixes' powers, the same as kubernetes.utils.parse_quantity's (tests/unit/spec/test_quantity.py compares the
# two). Ours because importing kubernetes.utils loads the whole client: 0.4-0.6 s of CPU in every module run, the
# local backend's included, which never talks to Kubernetes.
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

MIB = Decimal(2) ** 20
# Bounds that keep every quantity a plain int64 for Kubernetes and Slurm, and the arithmetic small: "1e999999999"
# or a 5,000-digit number is an error with its field path, never an OverflowError or a hang.
MAX_QUANTITY = Decimal(2) ** 63 - 1
MAX_QUANTITY_LENGTH = 64
_MAX_EXPONENT = 30
# Exact for every quantity within the bounds above (at most 64 digits times a 2^60 or 10^30 factor): the library's
# arithmetic runs in it, not in Decimal's default 28 digits.
_CONTEXT = Context(prec=200, Emax=1000, Emin=-1000, traps=[InvalidOperation, Overflow, Underflow])


class QuantityError(SoperatorError, ValueError):
    pass


def _short(value):
    text = repr(value) if isinstance(value, str) else "an integer of %d bits" % value.bit_length()
    return text if len(text) <= 40 else text[:30] + "...' (%d characters)" % len(value)


def is_quantity(value: object) -> bool:
    """A quantity parse_quantity reads (the grammar and the bounds)."""
    try:
        parse_quantity(value)
    except QuantityError:
        return False
    return True


def parse_quantity(value: object) -> Decimal:
    """Return the exact value of a Kubernetes quantity as a Decimal. Raises QuantityError (and nothing else)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QuantityError("%r is not a quantity (expected a number or a string like '16Gi' or '500m')" % (value,))
    if isinstance(value, int):
        if abs(value) > MAX_QUANTITY:
            raise QuantityError("%s is too large (at most 2^63-1)" % _short(value))
        return Decimal(value)
    if len(value) > MAX_QUANTITY_LENGTH:
        raise QuantityError("%s is too long for a quantity (at most %d characters)"
                            % (_short(value), MAX_QUANTITY_LENGTH))
    if not _QUANTITY_RE.match(value):
        raise QuantityError("%r is not a quantity (expected a number with an optional suffix: "
                            "Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent)" % (value,))
    exponent = _EXPONENT_RE.search(value)
    if exponent and abs(int(exponent.group(1))) > _MAX_EXPONENT:     # at most 64 digits: the length check above
        raise QuantityError("%r: the exponent is out of range (-%d to %d)" % (value, _MAX_EXPONENT, _MAX_EXPONENT))
    # The grammar and the bounds are Kubernetes' (kubernetes.utils also takes 'NaN', '1_000' and floats).
    try:
        with localcontext(_CONTEXT):
            if value[-1] == "i":
                result = Decimal(value[:-2]) * Decimal(2) ** _BINARY_SUFFIXES[value[-2:]]
            elif value[-1] in _DECIMAL_SUFFIXES:
                result = Decimal(value[:-1]).scaleb(_DECIMAL_SUFFIXES[value[-1]])
            else:
                result = +Decimal(value)
    except (ValueError, DecimalException):
        raise QuantityError("%r is not a quantity we can represent" % (value,))
    if abs(result) > MAX_QUANTITY:
        raise QuantityError("%r is too large (at most 2^63-1)" % (value,))
    return result


def to_mib(value: Union[int, str], rounding: str = "floor") -> int:
    """Bytes quantity -> whole MiB (Slurm's RealMemory unit). Floor by default: never promise memory we lack."""
    mib = parse_quantity(value) / MIB
    return int(mib.to_integral_value(rounding=ROUND_FLOOR if rounding == "floor" else ROUND_CEILING))


def to_cpus(value: Union[int, str]) -> int:
    """CPU quantity -> whole CPUs; Slurm cannot schedule fractions of a CPU, so "500m" is an error."""
    cpus = parse_quantity(value)
    if cpus != cpus.to_integral_value():
        raise QuantityError("%r is not a whole number of CPUs (Slurm schedules whole CPUs)" % (value,))
    return int(cpus)
