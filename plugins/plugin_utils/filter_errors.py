# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the collection's filters fail: an error of the library a filter wraps becomes AnsibleFilterError naming the
filter, the way Ansible reports a failed filter."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from contextlib import contextmanager

from ansible.errors import AnsibleFilterError


@contextmanager
def filter_errors(filter_name, *errors):
    """Inside: an exception of `errors` becomes AnsibleFilterError('<filter_name>: <its message>')."""
    try:
        yield
    except errors as e:
        raise AnsibleFilterError("%s: %s" % (filter_name, e))
