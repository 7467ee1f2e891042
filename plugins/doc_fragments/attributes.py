# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # What check mode and diff mode mean for every module of the collection; each module says how far it supports
    # them (support) and what it reports (details).
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Runs in check mode and reports what it would change (a truthful C(changed)) without changing it.
  diff_mode:
    description: Returns the before and after of what it changes (or, in check mode, would change) when run with C(--diff).
"""
