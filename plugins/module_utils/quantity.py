# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes resource quantities ("1600Gi", "500m", "1e3") as exact numbers, and the units Slurm wants."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from decimal import Decimal, InvalidOperation, ROUND_CEILING, ROUND_FLOOR

# The grammar of resource.Quantity: a signed decimal number and an optional binary, decimal or exponent suffix.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
_NUMBER_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")

_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
MIB = Decimal(2) ** 20


class QuantityError(ValueError):
    pass


def is_quantity(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and _QUANTITY_RE.match(value) is not None


def parse_quantity(value):
    """Return the exact value of a Kubernetes quantity as a Decimal. Raises QuantityError."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QuantityError("%r is not a quantity (expected a number or a string like '16Gi' or '500m')" % (value,))
    if isinstance(value, int):
        return Decimal(value)
    if not _QUANTITY_RE.match(value):
        raise QuantityError("%r is not a quantity (expected a number with an optional suffix: "
                            "Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent)" % (value,))
    number, suffix = _NUMBER_RE.match(value).groups()
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * (Decimal(10) ** Decimal(suffix[1:]))
        return Decimal(number) * _SUFFIXES[suffix]
    except (InvalidOperation, KeyError):
        raise QuantityError("%r is not a quantity" % (value,))


def to_mib(value, rounding="floor"):
    """Bytes quantity -> whole MiB (Slurm's RealMemory unit). Floor by default: never promise memory we lack."""
    mib = parse_quantity(value) / MIB
    return int(mib.to_integral_value(rounding=ROUND_FLOOR if rounding == "floor" else ROUND_CEILING))


def to_cpus(value):
    """CPU quantity -> whole CPUs; Slurm cannot schedule fractions of a CPU, so "500m" is an error."""
    cpus = parse_quantity(value)
    if cpus != cpus.to_integral_value():
        raise QuantityError("%r is not a whole number of CPUs (Slurm schedules whole CPUs)" % (value,))
    return int(cpus)
