# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The base of every error module_utils raises on purpose: SoperatorError(msg, **result).

module_base.SoperatorModule turns any of them into ``fail_json(msg=..., **result)`` in one place, so a module never
catches them itself. `result` holds what the module reports beside the message (a partial result, the field paths of
a spec's issues). The programs under node/ run in images with the standard library only and keep their own
exceptions (they import nothing from this collection).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class SoperatorError(Exception):
    """`msg` is the module's failure message; `result` the keys it returns with it."""

    def __init__(self, msg="", **result):
        super(SoperatorError, self).__init__(msg)
        self.msg = msg
        self.result = result
