# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters soperator.slurm.quantity_to_mib and soperator.slurm.quantity_to_cpus (docs: the adjacent .yml files)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.soperator.slurm.plugins.module_utils.spec.quantity import (
    QuantityError, parse_quantity, to_cpus, to_mib)
from ansible_collections.soperator.slurm.plugins.plugin_utils.filter_errors import filter_errors


def _non_negative(value, filter_name):
    with filter_errors(filter_name, QuantityError):
        negative = parse_quantity(value) < 0
    if negative:
        raise AnsibleFilterError("%s: %r is negative" % (filter_name, value))


def quantity_to_mib(value, rounding="floor"):
    """Kubernetes memory quantity -> whole MiB: '1600Gi' -> 1638400, '1G' -> 953 (floor) or 954 (ceil)."""
    if rounding not in ("floor", "ceil"):
        raise AnsibleFilterError("quantity_to_mib: rounding must be 'floor' or 'ceil', got %r" % (rounding,))
    _non_negative(value, "quantity_to_mib")
    with filter_errors("quantity_to_mib", QuantityError):
        return to_mib(value, rounding=rounding)


def quantity_to_cpus(value):
    """Kubernetes CPU quantity -> whole CPUs: '16' -> 16, '16000m' -> 16; '500m' is an error."""
    _non_negative(value, "quantity_to_cpus")
    with filter_errors("quantity_to_cpus", QuantityError):
        return to_cpus(value)


class FilterModule(object):
    def filters(self):
        return {"quantity_to_mib": quantity_to_mib, "quantity_to_cpus": quantity_to_cpus}
