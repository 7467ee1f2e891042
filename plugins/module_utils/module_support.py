# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules repeat, written once: the checks of their options and how a spec reaches them. Each raises a
SoperatorError, which module_base.SoperatorModule.run turns into the module's failure.

    ms.require_yaml()
    args.require_positive(module.params, "wait_timeout", "api_timeout")
    model = ms.model_from_options(module.params)   # src / definition -> ClusterModel, or SpecError with field paths

The shared argument specs and how a module reaches Slurm are args.py; the Kubernetes client and cluster kube/module.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import HAS_YAML
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model


def require_yaml():
    """Fail as Ansible does for a missing library when PyYAML is not installed (specs are YAML)."""
    if not HAS_YAML:
        raise SoperatorError(missing_required_lib("PyYAML"))


def read_documents(params, src="src", definition="definition"):
    """The spec documents of the `src` (a YAML file) or `definition` option; an unreadable file fails with
    'cannot read src'."""
    try:
        return documents_from(params[src], params[definition])
    except (IOError, OSError) as e:
        raise SoperatorError("cannot read src %s: %s" % (params[src], e))


def model_from_options(params, src="src", definition="definition"):
    """The ClusterModel of the `src` or `definition` option: SpecError (every issue with its field path) when the
    spec does not validate."""
    return build_model(read_documents(params, src, definition))
