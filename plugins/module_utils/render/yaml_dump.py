# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deterministic, diff-friendly YAML for everything we write out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    import yaml
    HAS_YAML = True
except ImportError:  # modules report it with missing_required_lib("PyYAML")
    yaml = None
    HAS_YAML = False


def _str_representer(dumper, data):
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


if HAS_YAML:
    class _Dumper(yaml.SafeDumper):
        """Block style for multi-line strings, so slurm.conf inside a ConfigMap stays readable in a diff."""

    _Dumper.add_representer(str, _str_representer)


def to_yaml(obj):
    """Keys keep the order the renderer built them in (stable, and kubectl-like: apiVersion, kind, metadata...)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
