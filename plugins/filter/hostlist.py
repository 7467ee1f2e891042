# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters soperator.slurm.hostlist_expand and soperator.slurm.hostlist_compress (docs: the adjacent .yml files)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.hostlist import (
    DEFAULT_MAX_HOSTS, HostlistError, compress, expand)
from ansible_collections.soperator.slurm.plugins.plugin_utils.filter_errors import filter_errors


def _expressions(value, filter_name):
    """A string, or a list of strings, each a hostlist expression."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, str):
                raise AnsibleFilterError("%s: list items must be strings, got %s %r"
                                         % (filter_name, type(item).__name__, item))
        return list(value)
    raise AnsibleFilterError("%s: expected a string or a list of strings, got %s %r"
                             % (filter_name, type(value).__name__, value))


def _expand_all(expressions, max_hosts, filter_name):
    names = []
    for expr in expressions:
        with filter_errors(filter_name, HostlistError):
            names.extend(expand(expr, max_hosts=max_hosts))
        if max_hosts is not None and len(names) > max_hosts:
            raise AnsibleFilterError("%s: the hostlists expand to more than %d hosts (max_hosts)"
                                     % (filter_name, max_hosts))
    return names


def hostlist_expand(value, max_hosts=DEFAULT_MAX_HOSTS):
    """'gpu-[0-2]' -> ['gpu-0', 'gpu-1', 'gpu-2']; a list of expressions is expanded one after the other."""
    expressions = _expressions(value, "hostlist_expand")
    if not expressions:
        raise AnsibleFilterError("hostlist_expand: empty list of hostlists")
    return _expand_all(expressions, max_hosts, "hostlist_expand")


def hostlist_compress(value, max_hosts=DEFAULT_MAX_HOSTS):
    """['gpu-1', 'gpu-0', 'gpu-2'] or 'gpu-1,gpu-0,gpu-2' -> 'gpu-[0-2]'; '' and [] give ''."""
    expressions = [expr for expr in _expressions(value, "hostlist_compress") if expr.strip(", \t\r\n\f\v")]
    names = _expand_all(expressions, max_hosts, "hostlist_compress")
    with filter_errors("hostlist_compress", HostlistError):
        return compress(names)


class FilterModule(object):
    def filters(self):
        return {"hostlist_expand": hostlist_expand, "hostlist_compress": hostlist_compress}
